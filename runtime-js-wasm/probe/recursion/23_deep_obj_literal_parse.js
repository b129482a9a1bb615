eval("x=" + "{a:".repeat(100000)+"1"+"}".repeat(100000))
