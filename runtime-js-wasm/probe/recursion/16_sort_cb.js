function s(n){ return [2,1].sort((x,y)=>s(n+1))} s(0)
