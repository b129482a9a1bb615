function* gen(n){ yield n; yield* gen(n+1) } let c=0; for (const x of gen(0)) { c++ }
