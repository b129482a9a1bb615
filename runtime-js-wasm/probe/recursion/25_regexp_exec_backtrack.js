/(a|b)*c/.exec("ab".repeat(20000))
