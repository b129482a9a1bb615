const p=new Proxy({}, {get(t,k,r){return r[k]}}); p.x
