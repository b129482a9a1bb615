function b(n){ return bb(n+1) } const bb=b.bind(null); b(0)
