function r(n){ return "a".replace(/a/, ()=>r(n+1)) } r(0)
