class A { constructor(n){ this.c = new A(n+1) } } new A(0)
