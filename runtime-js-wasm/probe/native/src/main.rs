//! The CPU loop of docs/notes/javascript-guest.md in native QuickJS-ng: medians of 20, each in a
//! fresh context as each execution of the guest has, the context made outside the timing.

use rquickjs::{Context, Runtime};
fn main() {
    let rt = Runtime::new().unwrap();
    let mut times = vec![];
    for _ in 0..20 {
        // A fresh context each time, as each execution of the guest has.
        let ctx = Context::full(&rt).unwrap();
        let t = std::time::Instant::now();
        ctx.with(|ctx| {
            let _: f64 = ctx.eval("let s=0; for (let i=0;i<1e6;i++) s+=i*i; s").unwrap();
        });
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("native QuickJS-ng (rquickjs 0.14.0): loop median {:.1} ms of 20", times[10]);
}
