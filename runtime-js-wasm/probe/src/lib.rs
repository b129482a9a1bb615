//! A minimal JavaScript (QuickJS-ng via rquickjs) guest for ptc-engine's `sandbox` world: a
//! probe for issue 47, not the runtime (docs/notes/javascript-guest.md says what it showed).
//! It evaluates a program as a script (`console.log`/`console.error` to stdout/stderr, the
//! last value as the result), and its tools are synchronous globals that block in
//! `wait-for-tools`, one call at a time. Stubbed: `resume` (it never unwinds to hibernate),
//! `snapshot`/`restore`, `describe-tools`' signatures and stub, `prime` beyond stdio and memory.

wit_bindgen::generate!({ world: "sandbox", path: "../../runtime-python-wasm/wit" });

use std::cell::RefCell;
use std::io::Write;

use ptc::sandbox::host::{self, ToolCall, ToolOutcome, WaitAnswer};
use rquickjs::function::{Func, Rest};
use rquickjs::{Coerced, Context, Ctx, Exception, Object, Runtime, Value};

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

thread_local! {
    static JS: RefCell<Option<Js>> = const { RefCell::new(None) };
    static TOOLS: RefCell<Vec<ToolDef>> = const { RefCell::new(Vec::new()) };
    static NEXT_ID: RefCell<u64> = const { RefCell::new(0) };
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

fn write_args(stream: &mut dyn Write, args: Rest<Coerced<String>>) {
    let line: Vec<String> = args.0.into_iter().map(|c| c.0).collect();
    let _ = writeln!(stream, "{}", line.join(" "));
}

/// One tool call, answered synchronously: hands it to the host and blocks in
/// `wait-for-tools` until its result arrives. Returns [ok, text].
fn call_tool(namespace: String, name: String, input: String) -> (bool, String) {
    let id = NEXT_ID.with(|n| {
        let mut n = n.borrow_mut();
        *n += 1;
        format!("c{}", *n)
    });
    let mut calls = vec![ToolCall { id: id.clone(), name, input, namespace }];
    loop {
        match host::wait_for_tools(&calls, None) {
            WaitAnswer::Results(results) => {
                calls.clear();
                for r in results {
                    if r.id == id {
                        return match r.outcome {
                            ToolOutcome::Ok(json) => (true, json),
                            ToolOutcome::Error(message) => (false, message),
                        };
                    }
                }
            }
            // This guest cannot unwind out of `execute`: wait again with no new calls.
            WaitAnswer::Hibernate => calls.clear(),
        }
    }
}

fn install_globals<'js>(ctx: &Ctx<'js>, tools: &[ToolDef]) -> rquickjs::Result<()> {
    let g = ctx.globals();
    let console = Object::new(ctx.clone())?;
    console.set("log", Func::from(|args: Rest<Coerced<String>>| write_args(&mut std::io::stdout().lock(), args)))?;
    console.set("error", Func::from(|args: Rest<Coerced<String>>| write_args(&mut std::io::stderr().lock(), args)))?;
    g.set("console", console)?;
    g.set("__sp", Func::from(|| shadow_sp() as f64))?;
    g.set(
        "__call_tool",
        Func::from(|ns: String, name: String, input: String| {
            let (ok, text) = call_tool(ns, name, input);
            vec![if ok { "ok".to_string() } else { "error".to_string() }, text]
        }),
    )?;
    // Tools as synchronous functions taking one object of keyword arguments.
    let mut src = String::from(
        "(function(){const mk=(ns,n)=>function(args){const r=__call_tool(ns,n,JSON.stringify(args===undefined?{}:args));\
         if(r[0]==='ok')return JSON.parse(r[1]);throw new Error(r[1]);};\n",
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
    ctx.eval::<(), _>(src)?;
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

struct Component;

impl Guest for Component {
    fn execute(code: String, tools: Option<Vec<ToolDef>>, session: bool, _env: Vec<(String, String)>) -> Outcome {
        if let Some(tools) = tools {
            TOOLS.with(|t| *t.borrow_mut() = tools);
        }
        let outcome = JS.with(|js| {
            let mut js = js.borrow_mut();
            if js.is_none() || !session {
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
            let result = j.ctx.with(|ctx| match ctx.eval::<Value, _>(code.as_bytes().to_vec()) {
                Ok(v) => {
                    let json = match ctx.json_stringify(v) {
                        Ok(Some(s)) => s.to_string().unwrap_or_else(|_| "null".into()),
                        _ => "null".into(),
                    };
                    Outcome::Completed(json)
                }
                Err(rquickjs::Error::Exception) => {
                    let (msg, tb) = describe_exception(&ctx);
                    let _ = writeln!(std::io::stderr(), "{tb}");
                    failure(FailureKind::PythonError, msg, tb)
                }
                Err(e) => failure(FailureKind::Internal, e.to_string(), String::new()),
            });
            // Promise jobs the program left.
            while let Ok(true) = j.rt.execute_pending_job() {}
            result
        });
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        outcome
    }

    fn resume() -> Outcome {
        failure(FailureKind::Internal, "resume: this guest never hibernates".into(), String::new())
    }

    fn prime(grow_by: u64) {
        // Stub: touches stdout and stderr (so their handles exist), then grows memory.
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
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
                python_name: js_name(&t.name),
                signature: format!("{}(args)", js_name(&t.name)),
            })
            .collect();
        Ok(Description { tools: described, stub: String::new() })
    }
}

export!(Component);
