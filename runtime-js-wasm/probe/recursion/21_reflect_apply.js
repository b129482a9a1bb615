function q(n){ return Reflect.apply(q, null, [n+1]) } q(0)
