function k(n){ return k.call(null,n+1) + k.apply(null,[n]) } k(0)
