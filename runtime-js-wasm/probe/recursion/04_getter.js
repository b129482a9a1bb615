const o={get x(){return this.x}}; o.x
