//! The JavaScript runtime (QuickJS-ng through rquickjs) of ptc-engine's `sandbox` world
//! (docs/javascript.md says what it does and how it differs from Node; docs/notes/javascript-guest.md
//! how it was chosen and measured).
//! A program is a script with top-level `await` (or, when it `return`s, an async function's
//! body); its tools are globals returning promises (`await add({a: 1, b: 2})`); the calls made
//! while the program's jobs run are handed to the host together in one `wait-for-tools`, so a
//! `Promise.all` of three calls is one round; a failing call rejects with a `ToolError`.
//! `console.log`/`console.error` go to stdout/stderr; the last value (or the returned one) is
//! the result. Timers are kept in the guest (`globals.rs`): while calls are out, the nearest
//! timer is `wait-for-tools`' timeout; with none out, the guest sleeps until it. When the
//! host answers `hibernate` the export returns `hibernated` with the program's state (its
//! promises, its timers) in linear memory, and `resume` carries on. `fs` reaches `/mnt/data`
//! (`files.rs`), `fetch` the network under the host's policy (`net.rs`). The host
//! checks programs' tool calls and renders the tools' `.d.ts`. A session keeps the runtime, and with it the globals,
//! from one program to the next; its snapshot is its instance's memory, which the host takes
//! (`snapshot` and `restore` name the globals kept).

// The generated `wait-for-tools` and `fetch` bindings take more arguments than clippy likes.
#![allow(clippy::too_many_arguments)]

wit_bindgen::generate!({ world: "sandbox", path: "../../runtime-python-wasm/wit" });

mod files;
mod globals;
mod net;

use std::cell::RefCell;
use std::collections::HashMap;

use ptc::sandbox::host::{self, ToolCall, ToolOutcome, WaitAnswer};
use rquickjs::context::EvalOptions;
use rquickjs::function::{Func, Rest};
use rquickjs::promise::PromiseState;
use rquickjs::{Coerced, Context, Ctx, Exception, Function, Object, Persistent, Promise, Runtime, Value};

/// QuickJS's stack limit (on the linear-memory stack, which `prewasi.h` lets it check): 256
/// KiB, so that a plain recursion ends in a `RangeError` (about 300 levels deep) before it
/// reaches wasmtime's 1 MiB native stack, whose end traps the instance (25 recursions in
/// `probe/recursion.sh`: 16 caught, 2 without error, 7 trapped, all in QuickJS's C
/// recursion). `PTC_JS_MAX_STACK` at build time sets another (`probe/build.sh`; 0: none).
fn max_stack() -> Option<usize> {
    let bytes = option_env!("PTC_JS_MAX_STACK").and_then(|s| s.parse().ok()).unwrap_or(256 * 1024);
    (bytes > 0).then_some(bytes)
}

struct Js {
    rt: Runtime,
    ctx: Context,
}

/// The calls of the program under way: made and not yet handed out, and handed out and not
/// yet answered.
#[derive(Default)]
struct Calls {
    new: Vec<ToolCall>,
    waiting: HashMap<String, Waiting>,
    next_id: u64,
}

/// A call handed out: its promise's resolve and reject functions, and for a failure's
/// `ToolError`, the tool's name and the program's stack where it called it.
struct Waiting {
    resolve: Persistent<Function<'static>>,
    reject: Persistent<Function<'static>>,
    tool: String,
    site: String,
}

thread_local! {
    static JS: RefCell<Option<Js>> = const { RefCell::new(None) };
    static TOOLS: RefCell<Vec<ToolDef>> = const { RefCell::new(Vec::new()) };
    static CALLS: RefCell<Calls> = RefCell::new(Calls::default());
    /// The program's own promise (what its evaluation returned), while it runs.
    static MAIN: RefCell<Option<(Persistent<Promise<'static>>, bool)>> = const { RefCell::new(None) };
    /// The enumerable globals a fresh runtime has: not the programs' own.
    static RUNTIME_GLOBALS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

fn enumerable_globals(ctx: &Ctx<'_>) -> Vec<String> {
    ctx.globals().keys::<String>().filter_map(|k| k.ok()).collect()
}

/// The globals the session's programs defined (`var`s and functions: `let`, `const` and
/// `class` are kept as well, in their own scope, but not listed).
fn program_globals() -> Vec<String> {
    JS.with(|js| {
        let js = js.borrow();
        let Some(j) = js.as_ref() else { return Vec::new() };
        let runtime = RUNTIME_GLOBALS.with(|r| r.borrow().clone());
        let mut names: Vec<String> =
            j.ctx.with(|ctx| enumerable_globals(&ctx)).into_iter().filter(|n| !runtime.contains(n)).collect();
        names.sort();
        names
    })
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

/// Runs the timers that are due; a callback's throw ends the program with it.
fn fire_timers(j: &Js) -> Option<Outcome> {
    j.ctx.with(|ctx| globals::fire_timers(&ctx).map(|thrown| failed(&ctx, thrown)))
}

/// The guest's globals in a new runtime: `console`, and the rest (`globals.rs`).
fn install_globals<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<()> {
    let console = Object::new(ctx.clone())?;
    console.set("log", Func::from(|args: Rest<Coerced<String>>| write_args(1, args)))?;
    console.set("error", Func::from(|args: Rest<Coerced<String>>| write_args(2, args)))?;
    ctx.globals().set("console", console)?;
    globals::install(ctx)
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
            let stack = format!("{}\n{}", msg, own_frames(&e.stack().unwrap_or_default()));
            return (msg, stack);
        }
    }
    let s = v.get::<Coerced<String>>().map(|c| c.0).unwrap_or_else(|_| "uncaught exception".into());
    (format!("Uncaught {s}"), format!("Uncaught {s}"))
}

/// The program's frames of a stack: the runtime's (`ptc:runtime`) are not its doing.
fn own_frames(stack: &str) -> String {
    let own: Vec<&str> = stack.lines().filter(|l| !l.trim().is_empty() && !l.contains("ptc:runtime")).collect();
    own.join("\n")
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
    globals::clear_timers();
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
        let due = globals::next_timer();
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
                let Some(call) = CALLS.with(|c| c.borrow_mut().waiting.remove(&r.id)) else { continue };
                let Waiting { resolve, reject, tool, site } = call;
                let settled = match r.outcome {
                    ToolOutcome::Ok(json) => ctx.json_parse(json).map(|value| (resolve, value)),
                    ToolOutcome::Error(message) => {
                        globals::tool_error(&ctx, &message, &tool, &site).map(|e| (reject.clone(), e))
                    }
                };
                // What could not be made (a result that is not JSON) rejects with its error.
                let (f, value) = settled.unwrap_or_else(|_| (reject, ctx.catch()));
                if let Ok(f) = f.restore(&ctx) {
                    let _ = f.call::<_, ()>((value,));
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
fn runtime_eval<'js, V: rquickjs::FromJs<'js>>(ctx: &Ctx<'js>, source: impl Into<Vec<u8>>) -> rquickjs::Result<V> {
    let mut options = EvalOptions::default();
    options.filename = Some("ptc:runtime".into());
    options.backtrace_barrier = true;
    ctx.eval_with_options::<V, _>(source, options)
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

/// A session's program that declares again a `let`, `const` or `class` an earlier one
/// declared: what to do instead, said with the error (as in Node's REPL, the names stay
/// declared for the session's life).
fn redeclared(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Failed(mut f) if f.message.starts_with("SyntaxError: redeclaration of") => {
            let hint = " (an earlier program of this session declared it: assign to it without let/const, or \
                        declare it with var, which may be declared again)";
            f.message.push_str(hint);
            write_fd(2, format!("{}\n", hint.trim()).as_bytes());
            Outcome::Failed(f)
        }
        other => other,
    }
}

unsafe extern "C" {
    /// wasi-libc's `write`.
    fn write(fd: i32, buf: *const u8, len: usize) -> isize;
}

/// Takes stdout's, stderr's and the preopened directory's WASI handles, in that order, as
/// `prime` does: wasi-libc takes each at its first use, so a program's own order (or its
/// printing nothing before it hibernates) would leave a thawed instance's memory naming
/// handles its new instance lacks.
fn take_handles() {
    // An empty write takes the handle and writes nothing (Python's runtime does the same).
    unsafe {
        write(1, [].as_ptr(), 0);
        write(2, [].as_ptr(), 0);
    }
    files::take_preopens();
}

struct Component;

impl Guest for Component {
    fn execute(code: String, tools: Option<Vec<ToolDef>>, session: bool, env: Vec<(String, String)>) -> Outcome {
        take_handles();
        let new_tools = tools.is_some();
        if let Some(tools) = tools {
            TOOLS.with(|t| *t.borrow_mut() = tools);
        }
        JS.with(|js| {
            let mut js = js.borrow_mut();
            if js.is_none() || !session {
                // What refers to the old runtime goes before it.
                MAIN.with(|m| m.borrow_mut().take());
                globals::reset();
                CALLS.with(|c| *c.borrow_mut() = Calls::default());
                *js = None;
                match new_js() {
                    Ok(j) => *js = Some(j),
                    Err(e) => return failure(FailureKind::Internal, format!("runtime: {e}"), String::new()),
                }
                let j = js.as_ref().unwrap();
                if let Err(e) = j.ctx.with(|ctx| install_globals(&ctx)) {
                    return failure(FailureKind::Internal, format!("globals: {e}"), String::new());
                }
                let own = j.ctx.with(|ctx| enumerable_globals(&ctx));
                RUNTIME_GLOBALS.with(|r| *r.borrow_mut() = own);
            }
            let j = js.as_ref().unwrap();
            if new_tools || !session {
                let tools = TOOLS.with(|t| t.borrow().clone());
                let installed =
                    j.ctx.with(|ctx| globals::install_tools(&ctx, &tools).map_err(|_| describe_exception(&ctx).1));
                if let Err(why) = installed {
                    return failure(
                        FailureKind::InvalidTools,
                        format!("the tools could not be defined: {why}"),
                        String::new(),
                    );
                }
            }
            if let Err(e) = j.ctx.with(|ctx| globals::set_env(&ctx, &env)) {
                return failure(FailureKind::Internal, format!("environment: {e}"), String::new());
            }
            let started = j.ctx.with(|ctx| {
                start(&ctx, &code)
                    .map(|(p, wrapped)| MAIN.with(|m| *m.borrow_mut() = Some((Persistent::save(&ctx, p), wrapped))))
            });
            let outcome = match started {
                Ok(()) => drive(j),
                Err(outcome) => outcome,
            };
            if session { redeclared(outcome) } else { outcome }
        })
    }

    fn resume() -> Outcome {
        JS.with(|js| match js.borrow().as_ref() {
            Some(j) => drive(j),
            None => failure(FailureKind::Internal, "resume: no program is paused here".into(), String::new()),
        })
    }

    fn prime(grow_by: u64) {
        // The handles every program's instance holds: stdout's and stderr's, and what making
        // a runtime takes (2 more, measured: `freeze` counts them); then memory.
        take_handles();
        let pages = grow_by.div_ceil(65536) as usize;
        if pages > 0 {
            core::arch::wasm32::memory_grow(0, pages);
        }
    }

    /// A JavaScript session's snapshot is its instance's memory, which the host takes (and
    /// bounds) after this: the guest names the globals its programs defined.
    fn snapshot(_max_bytes: u64) -> Result<SessionState, String> {
        Ok(SessionState { data: Vec::new(), kept: program_globals(), modules: Vec::new(), dropped: Vec::new() })
    }

    /// Called once the host has put a snapshot's memory back: the globals it holds.
    fn restore(data: Vec<u8>) -> Result<Restored, String> {
        if !data.is_empty() {
            return Err("a JavaScript snapshot is its instance's memory, which the host restores".into());
        }
        Ok(Restored { kept: program_globals(), dropped: Vec::new() })
    }

    /// The host renders JavaScript's declarations (`run/javascript/declarations.rs` in the
    /// engine), beside its pre-run check that words refusals with them.
    fn describe_tools(_: Vec<ToolDef>) -> Result<Description, String> {
        Err("the JavaScript runtime's tools are described by the host".into())
    }
}

export!(Component);
