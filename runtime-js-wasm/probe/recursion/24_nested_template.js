eval("`${".repeat(50000)+"1"+"}`".repeat(50000))
