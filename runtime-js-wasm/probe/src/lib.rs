//! A minimal JavaScript (QuickJS-ng via rquickjs) guest for ptc-engine's `sandbox` world: a
//! probe for issue 47, not the runtime (docs/notes/javascript-guest.md says what it showed).
//! A program is a script with top-level `await` (or, when it `return`s, an async function's
//! body); its tools are globals returning promises (`await add({a: 1, b: 2})`); the calls made
//! while the program's jobs run are handed to the host together in one `wait-for-tools`, so a
//! `Promise.all` of three calls is one round; a failing call rejects with a `ToolError`.
//! `console.log`/`console.error` go to stdout/stderr; the last value (or the returned one) is
//! the result. `setTimeout`/`clearTimeout` are kept in the guest: while calls are out, the
//! nearest timer is `wait-for-tools`' timeout; with none out, the guest sleeps until it. When the
//! host answers `hibernate` the export returns `hibernated` with the program's state (its
//! promises, its timers) in linear memory, and `resume` carries on. Not here:
//! `setInterval`, `snapshot`/`restore`, `describe-tools`' signatures and stub, the pre-run check, a session's
//! redeclared `let`s, `prime` beyond stdio and memory.

wit_bindgen::generate!({ world: "sandbox", path: "../../runtime-python-wasm/wit" });

use std::cell::RefCell;
use std::collections::HashMap;

use ptc::sandbox::host::{self, ToolCall, ToolOutcome, WaitAnswer};
use rquickjs::context::EvalOptions;
use rquickjs::function::{Func, Rest};
use rquickjs::promise::PromiseState;
use rquickjs::{Coerced, Context, Ctx, Exception, Function, Object, Persistent, Promise, Runtime, Value};

/// Build-time knobs (for the recursion probe), read with `option_env!` so that one source
/// builds each configuration:
/// - JSPROBE_MAX_STACK: bytes for `Runtime::set_max_stack_size` (unset: not called).
/// - JSPROBE_UPDATE_TOP: "1" to call `JS_UpdateStackTop` at each `execute`.
/// (`option_env!` is read when the crate compiles: `build.sh` sets it.)
fn max_stack() -> Option<usize> {
    option_env!("JSPROBE_MAX_STACK").and_then(|s| s.parse().ok())
}

struct Js {
    rt: Runtime,
    ctx: Context,
}

/// The calls of the program under way: made and not yet handed out, and handed out and not
/// yet answered (each call's promise's resolve and reject functions).
#[derive(Default)]
struct Calls {
    new: Vec<ToolCall>,
    waiting: HashMap<String, (Persistent<Function<'static>>, Persistent<Function<'static>>)>,
    next_id: u64,
}

thread_local! {
    static JS: RefCell<Option<Js>> = const { RefCell::new(None) };
    static TOOLS: RefCell<Vec<ToolDef>> = const { RefCell::new(Vec::new()) };
    static CALLS: RefCell<Calls> = RefCell::new(Calls::default());
    /// The program's own promise (what its evaluation returned), while it runs.
    static MAIN: RefCell<Option<(Persistent<Promise<'static>>, bool)>> = const { RefCell::new(None) };
}

/// The shadow (linear-memory) stack pointer, near enough: the address of a local.
#[inline(never)]
fn shadow_sp() -> usize {
    let x = 0u8;
    std::hint::black_box(&x) as *const u8 as usize
}

fn js_name(name: &str) -> String {
    name.replace(['-', '.'], "_")
}

fn new_js() -> rquickjs::Result<Js> {
    let rt = Runtime::new()?;
    if let Some(n) = max_stack() {
        rt.set_max_stack_size(n);
    }
    let ctx = Context::full(&rt)?;
    Ok(Js { rt, ctx })
}

/// One `console.log` (fd 1) or `console.error` (fd 2) line, through wasi-libc, the one path
/// to the WASI streams (Rust's std takes handles of its own: a program that printed held
/// others than `prime` takes).
fn write_args(fd: i32, args: Rest<Coerced<String>>) {
    let line: Vec<String> = args.0.into_iter().map(|c| c.0).collect();
    write_fd(fd, format!("{}\n", line.join(" ")).as_bytes());
}

fn write_fd(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let n = unsafe { write(fd, bytes.as_ptr(), bytes.len()) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// Milliseconds on the monotonic clock since this instance's first look at it (kept in linear
/// memory, so a thawed program's timers keep their place if the host's clock carries on).
fn now_ms() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_secs_f64() * 1000.0
}

/// When the nearest timer is due (`now_ms`), or `None`.
fn next_timer(j: &Js) -> Option<f64> {
    j.ctx.with(|ctx| {
        let timers: Object = ctx.globals().get("__timers").ok()?;
        let next: Function = timers.get("next").ok()?;
        let due: f64 = next.call((rquickjs::function::This(timers),)).ok()?;
        (due >= 0.0).then_some(due)
    })
}

/// Runs the timers that are due; a callback's throw ends the program with it.
fn fire_timers(j: &Js) -> Option<Outcome> {
    j.ctx.with(|ctx| {
        let timers: Object = ctx.globals().get("__timers").ok()?;
        let fire: Function = timers.get("fire").ok()?;
        match fire.call::<_, ()>((rquickjs::function::This(timers),)) {
            Err(rquickjs::Error::Exception) => {
                let thrown = ctx.catch();
                Some(failed(&ctx, thrown))
            }
            _ => None,
        }
    })
}

/// A call the program makes: a promise, settled when the host answers it (`drive`).
fn call_tool<'js>(ctx: Ctx<'js>, namespace: String, name: String, input: String) -> rquickjs::Result<Promise<'js>> {
    let (promise, resolve, reject) = ctx.promise()?;
    CALLS.with(|c| {
        let mut c = c.borrow_mut();
        c.next_id += 1;
        let id = format!("call_{}", c.next_id);
        c.waiting.insert(id.clone(), (Persistent::save(&ctx, resolve), Persistent::save(&ctx, reject)));
        c.new.push(ToolCall { id, name, input, namespace });
    });
    Ok(promise)
}

fn install_globals<'js>(ctx: &Ctx<'js>, tools: &[ToolDef]) -> rquickjs::Result<()> {
    let g = ctx.globals();
    let console = Object::new(ctx.clone())?;
    console.set("log", Func::from(|args: Rest<Coerced<String>>| write_args(1, args)))?;
    console.set("error", Func::from(|args: Rest<Coerced<String>>| write_args(2, args)))?;
    g.set("console", console)?;
    g.set("__sp", Func::from(|| shadow_sp() as f64))?;
    g.set("__call_tool", Func::from(call_tool))?;
    g.set("__now", Func::from(now_ms))?;
    // Timers: what is due when (`__now()`'s milliseconds), fired by `drive`.
    runtime_eval(
        ctx,
        "(()=>{let seq=0;const timers=new Map();\
         globalThis.setTimeout=(fn,ms,...args)=>{const id=++seq;timers.set(id,{due:__now()+Math.max(0,+ms||0),fn,args});return id;};\
         globalThis.clearTimeout=(id)=>{timers.delete(id);};\
         globalThis.__timers={next(){let d=-1;for(const t of timers.values())if(d<0||t.due<d)d=t.due;return d;},\
         fire(){const now=__now();for(const [id,t] of [...timers])if(t.due<=now){timers.delete(id);if(typeof t.fn==='function')t.fn(...t.args);}}};})();",
    )?;
    // Tools as functions of one object (the tool's JSON arguments) returning a promise.
    let mut src = String::from(
        "globalThis.ToolError=class ToolError extends Error{constructor(m,tool){super(m);this.name='ToolError';this.tool=tool;}};\
         (function(){const call=__call_tool;const mk=(ns,n)=>function(args){\
         return call(ns,n,JSON.stringify(args===undefined?{}:args)).then(JSON.parse,(m)=>{throw new ToolError(m,n);});};\n",
    );
    for t in tools {
        let n = js_name(&t.name);
        if t.namespace.is_empty() {
            src.push_str(&format!("globalThis[{:?}]=mk('',{:?});\n", n, t.name));
        } else {
            let ns = js_name(&t.namespace);
            src.push_str(&format!(
                "(globalThis[{ns:?}]=globalThis[{ns:?}]||{{}})[{n:?}]=mk({:?},{:?});\n",
                t.namespace, t.name
            ));
        }
    }
    src.push_str("})();");
    runtime_eval(ctx, src)?;
    Ok(())
}

fn failure(kind: FailureKind, message: String, traceback: String) -> Outcome {
    Outcome::Failed(Failure { kind, message, traceback, exit_code: None })
}

fn describe_exception<'js>(ctx: &Ctx<'js>) -> (String, String) {
    let v: Value = ctx.catch();
    if let Some(obj) = v.as_object() {
        let name: String = obj.get::<_, Coerced<String>>("name").map(|c| c.0).unwrap_or_else(|_| "Error".into());
        if let Some(e) = Exception::from_object(obj.clone()) {
            let msg = format!("{}: {}", name, e.message().unwrap_or_default());
            let stack = format!("{}\n{}", msg, e.stack().unwrap_or_default());
            return (msg, stack);
        }
    }
    let s = v.get::<Coerced<String>>().map(|c| c.0).unwrap_or_else(|_| "uncaught exception".into());
    (format!("Uncaught {s}"), format!("Uncaught {s}"))
}

/// The program's value as the host takes it: JSON text (`null` for what JSON cannot say).
fn to_json<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> String {
    match ctx.json_stringify(v) {
        Ok(Some(s)) => s.to_string().unwrap_or_else(|_| "null".into()),
        _ => "null".into(),
    }
}

/// `reason` (a rejection's or a throw's) as the program's failure, its stack on stderr.
fn failed<'js>(ctx: &Ctx<'js>, reason: Value<'js>) -> Outcome {
    let _ = ctx.throw(reason);
    let (msg, tb) = describe_exception(ctx);
    write_fd(2, format!("{tb}\n").as_bytes());
    failure(FailureKind::ProgramError, msg, tb)
}

/// `outcome`, the program's state let go (its calls left unanswered stay so).
fn ended(outcome: Outcome) -> Outcome {
    MAIN.with(|m| m.borrow_mut().take());
    CALLS.with(|c| *c.borrow_mut() = Calls::default());
    outcome
}

/// Runs the program's jobs until its promise settles, handing the calls made meanwhile to the
/// host together at each wait: one round per batch. Returns `hibernated` when the host says so.
fn drive(j: &Js) -> Outcome {
    loop {
        // Every job that can run now (a job's uncaught throw is its promise's rejection).
        loop {
            match j.rt.execute_pending_job() {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {}
            }
        }
        let settled = j.ctx.with(|ctx| {
            let (main, wrapped) = MAIN.with(|m| m.borrow().clone())?;
            let main = main.restore(&ctx).ok()?;
            match main.state() {
                PromiseState::Pending => None,
                PromiseState::Resolved => {
                    let v: Value = main.result::<Value>()?.ok()?;
                    // An async script's promise resolves to `{value}`; a wrapped body's to its return.
                    let v = if wrapped {
                        v
                    } else {
                        v.as_object().and_then(|o| o.get::<_, Value>("value").ok()).unwrap_or(v)
                    };
                    Some(Outcome::Completed(to_json(&ctx, v)))
                }
                PromiseState::Rejected => {
                    let reason = match main.result::<Value>() {
                        Some(Err(rquickjs::Error::Exception)) => ctx.catch(),
                        Some(Ok(v)) => v,
                        _ => Value::new_undefined(ctx.clone()),
                    };
                    Some(failed(&ctx, reason))
                }
            }
        });
        if let Some(outcome) = settled {
            return ended(outcome);
        }
        let (new, waiting) = CALLS.with(|c| {
            let mut c = c.borrow_mut();
            (std::mem::take(&mut c.new), c.waiting.len())
        });
        let due = next_timer(j);
        if new.is_empty() && waiting == 0 {
            let Some(due) = due else {
                return ended(failure(
                    FailureKind::ProgramError,
                    "the program waits for a promise nothing will settle: no tool call is outstanding and no timer is set"
                        .into(),
                    String::new(),
                ));
            };
            // Only timers: sleep until the nearest (the host's deadline still applies).
            std::thread::sleep(std::time::Duration::from_secs_f64((due - now_ms()).max(0.0) / 1000.0));
            if let Some(outcome) = fire_timers(j) {
                return ended(outcome);
            }
            continue;
        }
        let timeout = due.map(|due| (due - now_ms()).max(0.0).ceil() as u64);
        let results = match host::wait_for_tools(&new, timeout) {
            WaitAnswer::Results(results) => results,
            // The calls are handed out; the program's state stays in memory until `resume`.
            WaitAnswer::Hibernate => return Outcome::Hibernated,
        };
        j.ctx.with(|ctx| {
            for r in results {
                let Some((resolve, reject)) = CALLS.with(|c| c.borrow_mut().waiting.remove(&r.id)) else { continue };
                let (f, text) = match r.outcome {
                    ToolOutcome::Ok(json) => (resolve, json),
                    ToolOutcome::Error(message) => (reject, message),
                };
                if let Ok(f) = f.restore(&ctx) {
                    let _ = f.call::<_, ()>((text,));
                }
            }
        });
        if let Some(outcome) = fire_timers(j) {
            return ended(outcome);
        }
    }
}

/// The program's evaluation: named `program.js` in its errors' stacks (`promise`: with
/// top-level `await`).
fn program_options(promise: bool) -> EvalOptions {
    let mut options = EvalOptions::default();
    options.promise = promise;
    options.strict = false;
    options.filename = Some("program.js".into());
    options
}

/// The guest's own code (the tools' functions, timers), named apart from the program's, and
/// kept out of its errors' stacks (a backtrace barrier).
fn runtime_eval<'js>(ctx: &Ctx<'js>, source: impl Into<Vec<u8>>) -> rquickjs::Result<()> {
    let mut options = EvalOptions::default();
    options.filename = Some("ptc:runtime".into());
    options.backtrace_barrier = true;
    ctx.eval_with_options::<(), _>(source, options)
}

/// Starts `code`: as a script with top-level `await`, or, if it `return`s at top level, as an
/// async function's body (on the script's first line, so that line numbers stay the program's).
fn start<'js>(ctx: &Ctx<'js>, code: &str) -> Result<(Promise<'js>, bool), Outcome> {
    let first = ctx.eval_with_options::<Promise, _>(code.as_bytes().to_vec(), program_options(true));
    let (evaluated, wrapped) = match first {
        Err(rquickjs::Error::Exception) => {
            let thrown = ctx.catch();
            let returns = thrown
                .as_object()
                .and_then(|o| o.get::<_, Coerced<String>>("message").ok())
                .is_some_and(|m| m.0.contains("return"));
            if !returns {
                return Err(failed(ctx, thrown));
            }
            let body = format!("(async function(){{{code}\n}})()");
            (ctx.eval_with_options::<Promise, _>(body, program_options(false)), true)
        }
        other => (other, false),
    };
    match evaluated {
        Ok(p) => Ok((p, wrapped)),
        Err(rquickjs::Error::Exception) => {
            let thrown = ctx.catch();
            Err(failed(ctx, thrown))
        }
        Err(e) => Err(failure(FailureKind::Internal, e.to_string(), String::new())),
    }
}

unsafe extern "C" {
    /// wasi-libc's `write`.
    fn write(fd: i32, buf: *const u8, len: usize) -> isize;
}

/// Takes stdout's and stderr's WASI handles, in that order, as `prime` does: wasi-libc takes
/// each at its first use, so a program's own order (or its printing nothing before it
/// hibernates) would leave a thawed instance's memory naming handles its new instance lacks.
fn take_stdio() {
    // An empty write takes the handle and writes nothing (Python's runtime does the same).
    unsafe {
        write(1, [].as_ptr(), 0);
        write(2, [].as_ptr(), 0);
    }
}

struct Component;

impl Guest for Component {
    fn execute(code: String, tools: Option<Vec<ToolDef>>, session: bool, _env: Vec<(String, String)>) -> Outcome {
        take_stdio();
        if let Some(tools) = tools {
            TOOLS.with(|t| *t.borrow_mut() = tools);
        }
        let outcome = JS.with(|js| {
            let mut js = js.borrow_mut();
            if js.is_none() || !session {
                // What refers to the old runtime goes before it.
                MAIN.with(|m| m.borrow_mut().take());
                CALLS.with(|c| *c.borrow_mut() = Calls::default());
                *js = None;
                match new_js() {
                    Ok(j) => *js = Some(j),
                    Err(e) => return failure(FailureKind::Internal, format!("runtime: {e}"), String::new()),
                }
                let tools = TOOLS.with(|t| t.borrow().clone());
                let j = js.as_ref().unwrap();
                if let Err(e) = j.ctx.with(|ctx| install_globals(&ctx, &tools)) {
                    return failure(FailureKind::Internal, format!("globals: {e}"), String::new());
                }
            }
            let j = js.as_ref().unwrap();
            if option_env!("JSPROBE_UPDATE_TOP") == Some("1") {
                j.ctx.with(|ctx| unsafe {
                    let rt = rquickjs::qjs::JS_GetRuntime(ctx.as_raw().as_ptr());
                    rquickjs::qjs::JS_UpdateStackTop(rt);
                });
            }
            let started = j.ctx.with(|ctx| {
                start(&ctx, &code)
                    .map(|(p, wrapped)| MAIN.with(|m| *m.borrow_mut() = Some((Persistent::save(&ctx, p), wrapped))))
            });
            match started {
                Ok(()) => drive(j),
                Err(outcome) => outcome,
            }
        });
        outcome
    }

    fn resume() -> Outcome {
        let outcome = JS.with(|js| match js.borrow().as_ref() {
            Some(j) => drive(j),
            None => failure(FailureKind::Internal, "resume: no program is paused here".into(), String::new()),
        });
        outcome
    }

    fn prime(grow_by: u64) {
        // The handles every program's instance holds: stdout's and stderr's, and what making
        // a runtime takes (2 more, measured: `freeze` counts them); then memory.
        take_stdio();
        let pages = grow_by.div_ceil(65536) as usize;
        if pages > 0 {
            core::arch::wasm32::memory_grow(0, pages);
        }
    }

    fn snapshot(_max_bytes: u64) -> Result<SessionState, String> {
        Err("snapshot is not supported by the JS probe guest".into())
    }

    fn restore(_data: Vec<u8>) -> Result<Restored, String> {
        Err("restore is not supported by the JS probe guest".into())
    }

    fn describe_tools(tools: Vec<ToolDef>) -> Result<Description, String> {
        let described = tools
            .iter()
            .map(|t| DescribedTool {
                name: t.name.clone(),
                code_name: js_name(&t.name),
                signature: format!("{}(args)", js_name(&t.name)),
            })
            .collect();
        Ok(Description { tools: described, stub: String::new() })
    }
}

export!(Component);
