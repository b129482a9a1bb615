//! The globals the guest gives programs, made in Rust: timers (`setTimeout`, `setInterval`
//! and their clears), the tools, `search_tools` and `describe_tools`, `ToolError`,
//! `process.env`, and `fs`, `fetch` and `Headers`
//! (compiled from `extras.js` at the first use of one of them). Made in JavaScript they took
//! most of a fresh `1+1`: compiling the guest's own 2.3 KB of it cost 0.37 ms of 0.75
//! (`phases`), where `ToolError`'s class alone is a few lines.

use std::cell::RefCell;
use std::collections::BTreeMap;

use rquickjs::function::{Func, Opt, Rest};
use rquickjs::object::{Accessor, Property};
use rquickjs::{Coerced, Constructor, Ctx, Exception, Function, Object, Persistent, Promise, Result, Value};

use crate::ToolDef;
use crate::ptc::sandbox::host::ToolCall;
use crate::{CALLS, Waiting, files, js_name, net, now_ms, own_frames, runtime_eval};

/// One timer: when it is due (`now_ms`), how often it repeats (an interval), what it calls.
struct Timer {
    due: f64,
    every: Option<f64>,
    callback: Persistent<Function<'static>>,
    args: Vec<Persistent<Value<'static>>>,
}

/// What the current runtime's globals hold on the Rust side. Every `Persistent` here must go
/// before its runtime does ([`reset`]).
#[derive(Default)]
struct State {
    timers: BTreeMap<u32, Timer>,
    last_timer: u32,
    tool_error: Option<Persistent<Constructor<'static>>>,
    /// The tools installed for the last program: (namespace, name) as globals name them.
    installed: Vec<(String, String)>,
    /// The objects made for tool namespaces.
    spaces: Vec<Persistent<Object<'static>>>,
    extras: Option<Persistent<Object<'static>>>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// Lets go of what refers to the current runtime, before a new one is made.
pub(crate) fn reset() {
    STATE.with(|s| *s.borrow_mut() = State::default());
}

/// The timers still set when a program ends go with it: a session's next program does not
/// run them.
pub(crate) fn clear_timers() {
    STATE.with(|s| s.borrow_mut().timers.clear());
}

/// A new runtime's globals: timers, `ToolError`, the accessors that make `fs`, `fetch` and
/// `Headers` at their first use, and `search_tools` and `describe_tools`.
pub(crate) fn install<'js>(ctx: &Ctx<'js>) -> Result<()> {
    let tool_error: Constructor = runtime_eval(
        ctx,
        "(class ToolError extends Error { constructor(message, tool) { super(message); this.name = 'ToolError'; \
         this.tool = tool; } })",
    )?;
    STATE.with(|s| s.borrow_mut().tool_error = Some(Persistent::save(ctx, tool_error)));
    let g = ctx.globals();
    for name in OWN {
        own(&g, name)?;
    }
    Ok(())
}

/// The globals the runtime defines itself ([`own`] makes each).
const OWN: [&str; 10] = [
    "setTimeout",
    "setInterval",
    "clearTimeout",
    "clearInterval",
    "ToolError",
    "fs",
    "fetch",
    "Headers",
    "search_tools",
    "describe_tools",
];

/// Defines the runtime's own global `name` (one of [`OWN`]; any other name: nothing), as a new
/// runtime has it, or again once a tool of that name is gone.
fn own<'js>(g: &Object<'js>, name: &str) -> Result<()> {
    match name {
        "setTimeout" | "setInterval" => {
            let every = name == "setInterval";
            g.set(
                name,
                Func::from(move |ctx: Ctx<'js>, f: Value<'js>, ms: Opt<Coerced<f64>>, args: Rest<Value<'js>>| {
                    set_timer(&ctx, f, ms.0.map(|c| c.0), args.0, every)
                }),
            )
        }
        "clearTimeout" | "clearInterval" => {
            g.set(name, Func::from(|id: Opt<Coerced<f64>>| clear_timer(id.0.map(|c| c.0))))
        }
        "ToolError" => {
            let class = STATE.with(|s| s.borrow().tool_error.clone()).ok_or(rquickjs::Error::Unknown)?;
            g.set(name, class.restore(g.ctx())?)
        }
        "fs" => lazy(g, "fs"),
        "fetch" => lazy(g, "fetch"),
        "Headers" => lazy(g, "Headers"),
        // Finding tools by what they do, for tool sets too large for a model's prompt; rendered
        // as the engine renders declarations (`ptc-js-declarations`).
        "search_tools" => g.set(
            name,
            Func::from(|query: Coerced<String>, limit: Opt<Coerced<f64>>| {
                let limit = limit.0.map_or(10, |l| l.0.clamp(1.0, 1000.0) as usize);
                with_tools(|tools| ptc_js_declarations::search::search(tools, &query.0, limit))
            }),
        ),
        "describe_tools" => g.set(
            name,
            Func::from(|names: Value<'js>| -> Result<String> {
                let names: Vec<String> = match names.as_string() {
                    Some(one) => vec![one.to_string()?],
                    None => names.get::<Vec<Coerced<String>>>()?.into_iter().map(|c| c.0).collect(),
                };
                Ok(with_tools(|tools| ptc_js_declarations::search::describe(tools, &names)))
            }),
        ),
        _ => Ok(()),
    }
}

/// `f` of the current program's tools, as `ptc-js-declarations` reads them.
fn with_tools<T>(f: impl FnOnce(&[ptc_js_declarations::ToolDef<'_>]) -> T) -> T {
    crate::TOOLS.with(|tools| {
        let tools = tools.borrow();
        let views: Vec<ptc_js_declarations::ToolDef<'_>> = tools
            .iter()
            .map(|t| ptc_js_declarations::ToolDef {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
                namespace: &t.namespace,
                returns: &t.returns,
                observed: t.observed,
            })
            .collect();
        f(&views)
    })
}

/// `name` (one of those `extras.js` makes) as an accessor that makes it at its first use.
fn lazy<'js>(g: &Object<'js>, name: &'static str) -> Result<()> {
    let get = move |ctx: Ctx<'js>| -> Result<Value<'js>> {
        let value: Value = extras(&ctx)?.get(name)?;
        define(&ctx.globals(), name, value.clone())?;
        Ok(value)
    };
    let set = move |ctx: Ctx<'js>, value: Value<'js>| define(&ctx.globals(), name, value);
    g.prop(name, Accessor::new(get, set).configurable())
}

/// Takes away a global the last program's tools made, giving back the runtime's own of that
/// name (`fs`, `search_tools`, ...) if there is one.
fn unset<'js>(g: &Object<'js>, name: &str) -> Result<()> {
    g.remove(name)?;
    own(g, name)
}

/// `name` on `object` as a plain writable, configurable value, whatever it was (an accessor
/// of the guest's, a runtime's global).
fn define<'js>(object: &Object<'js>, name: &str, value: Value<'js>) -> Result<()> {
    object.prop(name, Property::from(value).writable().configurable())
}

/// What `extras.js` makes (`fs`, `fetch`, `Headers`), made once.
fn extras<'js>(ctx: &Ctx<'js>) -> Result<Object<'js>> {
    if let Some(made) = STATE.with(|s| s.borrow().extras.clone()) {
        return made.restore(ctx);
    }
    let make: Function = runtime_eval(ctx, include_str!("extras.js"))?;
    let made: Object = make.call((files::host(ctx)?, net::host(ctx)?))?;
    STATE.with(|s| s.borrow_mut().extras = Some(Persistent::save(ctx, made.clone())));
    Ok(made)
}

fn set_timer<'js>(ctx: &Ctx<'js>, f: Value<'js>, ms: Option<f64>, args: Vec<Value<'js>>, repeat: bool) -> Result<u32> {
    let ms = ms.filter(|m| m.is_finite()).unwrap_or(0.0).max(0.0);
    let every = repeat.then_some(ms.max(1.0));
    let Some(callback) = f.into_function() else {
        return Err(Exception::throw_type(ctx, "the callback must be a function"));
    };
    let timer = Timer {
        due: now_ms() + every.unwrap_or(ms),
        every,
        callback: Persistent::save(ctx, callback),
        args: args.into_iter().map(|a| Persistent::save(ctx, a)).collect(),
    };
    Ok(STATE.with(|s| {
        let mut s = s.borrow_mut();
        s.last_timer += 1;
        let id = s.last_timer;
        s.timers.insert(id, timer);
        id
    }))
}

fn clear_timer(id: Option<f64>) {
    if let Some(id) = id.filter(|i| i.is_finite() && *i >= 0.0) {
        STATE.with(|s| s.borrow_mut().timers.remove(&(id as u32)));
    }
}

/// When the nearest timer is due (`now_ms`), or `None`.
pub(crate) fn next_timer() -> Option<f64> {
    STATE.with(|s| s.borrow().timers.values().map(|t| t.due).reduce(f64::min))
}

/// Runs the timers that are due (an interval is set again first); a callback's throw is
/// returned, the program's end.
pub(crate) fn fire_timers<'js>(ctx: &Ctx<'js>) -> Option<Value<'js>> {
    let now = now_ms();
    let due: Vec<(Persistent<Function<'static>>, Vec<Persistent<Value<'static>>>)> = STATE.with(|s| {
        let mut s = s.borrow_mut();
        let ids: Vec<u32> = s.timers.iter().filter(|(_, t)| t.due <= now).map(|(id, _)| *id).collect();
        ids.into_iter()
            .filter_map(|id| {
                let t = s.timers.get_mut(&id)?;
                let fired = (t.callback.clone(), t.args.clone());
                match t.every {
                    Some(every) => t.due = now + every,
                    None => drop(s.timers.remove(&id)),
                }
                Some(fired)
            })
            .collect()
    });
    for (callback, args) in due {
        let (Ok(callback), Ok(args)) =
            (callback.restore(ctx), args.into_iter().map(|a| a.restore(ctx)).collect::<Result<Vec<_>>>())
        else {
            continue;
        };
        if let Err(rquickjs::Error::Exception) = callback.call::<_, ()>((Rest(args),)) {
            return Some(ctx.catch());
        }
    }
    None
}

/// Makes `tools` the program's, in place of the last program's: functions named as in the
/// tool list (`-` and `.` as `_`), in an object per namespace. A tool's name wins over a
/// global of the runtime's (a server named `fs`, a tool named `fetch`).
pub(crate) fn install_tools<'js>(ctx: &Ctx<'js>, tools: &[ToolDef]) -> Result<()> {
    let g = ctx.globals();
    // The last program's tools go, and the namespaces made for them (a global the program
    // itself set since is left as it is).
    let (installed, spaces) = STATE.with(|s| {
        let mut s = s.borrow_mut();
        (std::mem::take(&mut s.installed), std::mem::take(&mut s.spaces))
    });
    let spaces: Vec<Object> = spaces.into_iter().filter_map(|p| p.restore(ctx).ok()).collect();
    let ours = |spaces: &[Object<'js>], value: &Value<'js>| value.as_object().is_some_and(|o| spaces.contains(o));
    let mut gone: Vec<String> = Vec::new();
    for (ns, n) in installed {
        let name = if ns.is_empty() { n } else { ns };
        if gone.contains(&name) {
            continue;
        }
        let current: Value = g.get(name.as_str())?;
        if current.as_function().is_some() || ours(&spaces, &current) {
            unset(&g, &name)?;
        }
        gone.push(name);
    }
    let mut spaces: Vec<Object> = Vec::new();
    let mut now_installed = Vec::with_capacity(tools.len());
    for t in tools {
        let (namespace, name) = (t.namespace.clone(), t.name.clone());
        let function = Func::from(move |ctx: Ctx<'js>, args: Opt<Value<'js>>| call(&ctx, &namespace, &name, args.0));
        let n = js_name(&t.name);
        if t.namespace.is_empty() {
            g.prop(n.as_str(), Property::from(function).writable().configurable())?;
            now_installed.push((String::new(), n));
            continue;
        }
        let ns = js_name(&t.namespace);
        let current: Value = g.get(ns.as_str())?;
        let space = match current.as_object().filter(|_| ours(&spaces, &current)) {
            Some(space) => space.clone(),
            None => {
                let space = Object::new(ctx.clone())?;
                STATE.with(|s| s.borrow_mut().spaces.push(Persistent::save(ctx, space.clone())));
                spaces.push(space.clone());
                define(&g, &ns, space.clone().into_value())?;
                space
            }
        };
        space.set(n.as_str(), function)?;
        now_installed.push((ns, n));
    }
    STATE.with(|s| s.borrow_mut().installed = now_installed);
    Ok(())
}

/// A call the program makes: a promise, settled when the host answers it (`drive`). Where the
/// program made it is kept for a failure's `ToolError`.
fn call<'js>(ctx: &Ctx<'js>, namespace: &str, name: &str, args: Option<Value<'js>>) -> Result<Promise<'js>> {
    let args = match args.filter(|a| !a.is_undefined()) {
        Some(args) => args,
        None => Object::new(ctx.clone())?.into_value(),
    };
    let input = match ctx.json_stringify(args)? {
        Some(text) => text.to_string()?,
        None => "{}".into(),
    };
    let site = Exception::from_message(ctx.clone(), "")?.stack().unwrap_or_default();
    let (promise, resolve, reject) = ctx.promise()?;
    CALLS.with(|c| {
        let mut c = c.borrow_mut();
        c.next_id += 1;
        let id = format!("call_{}", c.next_id);
        let waiting = Waiting {
            resolve: Persistent::save(ctx, resolve),
            reject: Persistent::save(ctx, reject),
            tool: name.to_string(),
            site,
        };
        c.waiting.insert(id.clone(), waiting);
        c.new.push(ToolCall { id, name: name.to_string(), input, namespace: namespace.to_string() });
    });
    Ok(promise)
}

/// A failed call's `ToolError`: the tool's `message`, its name, and the program's frames where
/// it made the call as its stack.
pub(crate) fn tool_error<'js>(ctx: &Ctx<'js>, message: &str, tool: &str, site: &str) -> Result<Value<'js>> {
    let class = STATE.with(|s| s.borrow().tool_error.clone()).ok_or(rquickjs::Error::Unknown)?;
    let error: Object = class.restore(ctx)?.construct((message, tool))?;
    error.set("stack", format!("{}\n", own_frames(site)))?;
    Ok(error.into_value())
}

/// The execution's environment as `process.env`: the names of the secrets its network policy
/// lets it use, each with its placeholder (the host puts the value in where a request
/// carries the placeholder; the program never sees it).
pub(crate) fn set_env<'js>(ctx: &Ctx<'js>, env: &[(String, String)]) -> Result<()> {
    let freeze: Function = ctx.globals().get::<_, Object>("Object")?.get("freeze")?;
    let vars = Object::new(ctx.clone())?;
    for (name, value) in env {
        vars.set(name.as_str(), value.as_str())?;
    }
    let process = Object::new(ctx.clone())?;
    process.set("env", freeze.call::<_, Object>((vars,))?)?;
    let process: Object = freeze.call((process,))?;
    define(&ctx.globals(), "process", process.into_value())
}
