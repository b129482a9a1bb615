function h(n){ return [n].map(x=>h(x+1))[0] } h(0)
