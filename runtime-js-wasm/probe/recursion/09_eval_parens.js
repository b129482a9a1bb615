eval("(".repeat(200000)+"1"+")".repeat(200000))
