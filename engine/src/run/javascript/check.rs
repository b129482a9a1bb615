//! The check of a JavaScript program against its tools before it runs (what Python's guest does
//! in `check.py`, here on the host with swc's parser): a tool call written so that it can only
//! fail refuses the program before any of it runs, so no earlier call has had its side effect,
//! with what the model needs to write it right.
//!
//! It reads only calls it can be sure of: `tool(...)` and `namespace.tool(...)` where the name
//! is the tool's (the program binds it to nothing else, anywhere). For those it refuses:
//! - an attribute a namespace has no tool of (`github.create_isue`), and a name bound nowhere
//!   that is a letter or so from a tool's (`get_wether`), each with "did you mean";
//! - an awaited call of a name bound nowhere, far from every tool's and no global of the
//!   runtime (`await web_search({...})`), saying where a namespaced tool of that name is, or
//!   what the tools are; not in a session (earlier programs' globals are the guest's) nor in a
//!   program that may define globals it does not declare (`eval`, `globalThis`, `with`);
//! - anything but one object argument; in an object literal, a key the tool does not take, a
//!   required one missing, and a literal of a JSON type its schema does not take for that key;
//! - a call that is a statement of its own, unawaited, whose result and errors would be lost.
//!
//! Anything else passes: a call through another name, a computed key or a spread, a schema it
//! cannot read simply (`anyOf`, `$ref`, ...), and any call in the `try` block of a `try` that
//! catches (the program means to handle what it throws). A program that does not parse is left
//! to the guest, whose `SyntaxError` says where.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use swc_common::{BytePos, Span};
use swc_ecma_ast as ast;
use swc_ecma_parser::{Parser, StringInput, Syntax};
use swc_ecma_visit::{Visit, VisitWith};

use crate::api::request::ToolDef;
use ptc_js_declarations::{Declared, closest, code_name, ident};

/// The most problems a refusal lists (the first ones, in line order).
const MAX_SHOWN: usize = 5;
/// The most names, and namespaces, an overview of the tools shows.
const OVERVIEW_NAMES: usize = 10;

/// The program is read as the body of an async function, where `await` and `return` are
/// allowed at its top level, as the guest runs it.
const BEFORE: &str = "async function __ptc_program() {";
const AFTER: &str = "\n}";

/// The globals of the guest's runtime (QuickJS-ng's, and ptc-engine's own): an awaited call of
/// one of them is no misspelt tool. `javascript::the_check_knows_every_global_of_the_guest`
/// holds it to what the guest has.
pub(crate) const GLOBALS: &[&str] = &[
    "AggregateError",
    "Array",
    "ArrayBuffer",
    "AsyncDisposableStack",
    "Atomics",
    "BigInt",
    "BigInt64Array",
    "BigUint64Array",
    "Boolean",
    "DOMException",
    "DataView",
    "Date",
    "DisposableStack",
    "Error",
    "EvalError",
    "FinalizationRegistry",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "Function",
    "Headers",
    "Infinity",
    "Int16Array",
    "Int32Array",
    "Int8Array",
    "InternalError",
    "Iterator",
    "JSON",
    "Map",
    "Math",
    "NaN",
    "Number",
    "Object",
    "Promise",
    "Proxy",
    "RangeError",
    "ReferenceError",
    "Reflect",
    "RegExp",
    "Set",
    "SharedArrayBuffer",
    "String",
    "SuppressedError",
    "Symbol",
    "SyntaxError",
    "ToolError",
    "TypeError",
    "URIError",
    "Uint16Array",
    "Uint32Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "WeakMap",
    "WeakRef",
    "WeakSet",
    "atob",
    "btoa",
    "clearInterval",
    "clearTimeout",
    "console",
    "decodeURI",
    "decodeURIComponent",
    "describe_tools",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "eval",
    "fetch",
    "fs",
    "globalThis",
    "isFinite",
    "isNaN",
    "parseFloat",
    "parseInt",
    "performance",
    "process",
    "queueMicrotask",
    "search_tools",
    "setInterval",
    "setTimeout",
    "structuredClone",
    "undefined",
    "unescape",
];

/// Names through which a program may define a global it never declares.
const DYNAMIC: &[&str] = &["eval", "Function", "globalThis"];

/// `code` (JavaScript) checked against `tools`: the program to run instead, one that throws
/// the refusal at the first problem's line, or `None` when there is none. `session`: a live
/// session's program, which may use what earlier ones defined.
pub(crate) fn refusal(code: &str, tools: &[ToolDef], session: bool) -> Option<String> {
    // A program that calls nothing has nothing to check (and is not parsed).
    if tools.is_empty() || !code.contains('(') {
        return None;
    }
    let problems = problems(code, tools, session);
    let (line, column, _) = problems.first()?;
    let mut listed: Vec<String> =
        problems.iter().take(MAX_SHOWN).map(|(line, _, message)| format!("  line {line}: {message}")).collect();
    if problems.len() > MAX_SHOWN {
        listed.push(format!("  … and {} more", problems.len() - MAX_SHOWN));
    }
    let message = format!(
        "the program was not run: its tool call{} work as written (nothing ran, so nothing needs undoing); \
         fix and run it again:\n{}",
        if problems.len() == 1 { " cannot" } else { "s cannot" },
        listed.join("\n")
    );
    Some(super::thrower::thrower("ToolCheckError", &message, *line, *column))
}

/// A tool as `ptc-js-declarations` reads it (the engine's `describe_tools` too).
pub(crate) fn declared(tool: &crate::instance::bindings::ToolDef) -> ptc_js_declarations::ToolDef<'_> {
    ptc_js_declarations::ToolDef {
        name: &tool.name,
        description: &tool.description,
        parameters: &tool.parameters,
        namespace: &tool.namespace,
        returns: &tool.returns,
        observed: tool.observed,
    }
}

/// The problems of `code`'s tool calls, as `(line, column, message)` (1-based) in order.
fn problems(code: &str, tools: &[ToolDef], session: bool) -> Vec<(usize, usize, String)> {
    let wrapped = format!("{BEFORE}{code}{AFTER}");
    let input = StringInput::new(&wrapped, BytePos(1), BytePos(1 + wrapped.len() as u32));
    let mut parser = Parser::new(Syntax::Es(Default::default()), input, None);
    let Ok(script) = parser.parse_script() else { return Vec::new() };
    if !parser.take_errors().is_empty() {
        return Vec::new();
    }
    let mut walk = Walk::default();
    script.visit_with(&mut walk);
    let checker = Checker::new(tools, &walk, session);
    let mut found: Vec<(usize, String)> = Vec::new();
    for call in &walk.calls {
        if let Some(problem) = checker.call(call, &wrapped) {
            found.push((call.span.lo.0 as usize, problem));
        }
    }
    found.sort();
    found.dedup();
    found
        .into_iter()
        .map(|(at, message)| {
            // Offsets count from 1, and the wrapper comes first.
            let offset = (at - 1).saturating_sub(BEFORE.len()).min(code.len());
            let before = &code[..offset];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            (line, column, message)
        })
        .collect()
}

/// One call the check may read.
struct Call {
    span: Span,
    callee: Callee,
    args: Vec<ast::ExprOrSpread>,
    awaited: bool,
    /// A statement of its own, unawaited.
    alone: bool,
}

enum Callee {
    Name(String),
    Member(String, String),
}

/// One walk of the program: the names it binds, whether it may define globals it does not
/// declare, and the calls outside a `try` block that catches.
#[derive(Default)]
struct Walk {
    bound: HashSet<String>,
    dynamic: bool,
    calls: Vec<Call>,
    awaited: HashSet<(u32, u32)>,
    alone: HashSet<(u32, u32)>,
    handled: usize,
}

fn key(span: Span) -> (u32, u32) {
    (span.lo.0, span.hi.0)
}

/// The call an expression is, through parentheses.
fn call_of(expr: &ast::Expr) -> Option<&ast::CallExpr> {
    match unparenthesised(expr) {
        ast::Expr::Call(call) => Some(call),
        _ => None,
    }
}

impl Visit for Walk {
    fn visit_binding_ident(&mut self, node: &ast::BindingIdent) {
        self.bound.insert(node.id.sym.to_string());
    }

    fn visit_fn_decl(&mut self, node: &ast::FnDecl) {
        self.bound.insert(node.ident.sym.to_string());
        node.visit_children_with(self);
    }

    fn visit_class_decl(&mut self, node: &ast::ClassDecl) {
        self.bound.insert(node.ident.sym.to_string());
        node.visit_children_with(self);
    }

    fn visit_ident(&mut self, node: &ast::Ident) {
        if DYNAMIC.contains(&node.sym.as_ref()) {
            self.dynamic = true;
        }
    }

    fn visit_with_stmt(&mut self, node: &ast::WithStmt) {
        self.dynamic = true;
        node.visit_children_with(self);
    }

    fn visit_await_expr(&mut self, node: &ast::AwaitExpr) {
        if let Some(call) = call_of(&node.arg) {
            self.awaited.insert(key(call.span));
        }
        node.visit_children_with(self);
    }

    fn visit_expr_stmt(&mut self, node: &ast::ExprStmt) {
        if let Some(call) = call_of(&node.expr) {
            self.alone.insert(key(call.span));
        }
        node.visit_children_with(self);
    }

    fn visit_try_stmt(&mut self, node: &ast::TryStmt) {
        let catches = node.handler.is_some();
        self.handled += usize::from(catches);
        node.block.visit_with(self);
        self.handled -= usize::from(catches);
        node.handler.visit_with(self);
        node.finalizer.visit_with(self);
    }

    fn visit_call_expr(&mut self, node: &ast::CallExpr) {
        node.visit_children_with(self);
        if self.handled > 0 {
            return;
        }
        let ast::Callee::Expr(callee) = &node.callee else { return };
        let callee = match &**callee {
            ast::Expr::Ident(name) => Callee::Name(name.sym.to_string()),
            ast::Expr::Member(ast::MemberExpr { obj, prop: ast::MemberProp::Ident(prop), .. }) => match &**obj {
                ast::Expr::Ident(space) => Callee::Member(space.sym.to_string(), prop.sym.to_string()),
                _ => return,
            },
            _ => return,
        };
        let at = key(node.span);
        self.calls.push(Call {
            span: node.span,
            callee,
            args: node.args.clone(),
            awaited: self.awaited.contains(&at),
            alone: self.alone.contains(&at),
        });
    }
}

/// A tool as the check reads it.
struct Tool<'a> {
    def: &'a ToolDef,
    parameters: Option<std::sync::Arc<Value>>,
}

impl Tool<'_> {
    /// Its signature line, as `describe_tools` shows it.
    fn declared(&self) -> String {
        let text = |schema: Option<&Value>| schema.map(Value::to_string).unwrap_or_default();
        let (parameters, returns) = (text(self.parameters.as_deref()), text(self.def.returns.as_deref()));
        let view = ptc_js_declarations::ToolDef {
            name: &self.def.name,
            namespace: self.def.namespace.as_deref().unwrap_or_default(),
            parameters: &parameters,
            returns: &returns,
            ..Default::default()
        };
        Declared::of(&view).line()
    }

    /// How the program calls it.
    fn code_name(&self) -> String {
        code_name(self.def.namespace.as_deref().unwrap_or_default(), &self.def.name)
    }

    fn properties(&self) -> Option<&serde_json::Map<String, Value>> {
        self.parameters.as_ref()?.get("properties")?.as_object()
    }

    fn required(&self) -> Vec<&str> {
        let required = self.parameters.as_ref().and_then(|p| p.get("required")).and_then(Value::as_array);
        required.map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect())
    }

    /// Whether it takes keys besides its properties: unless its schema says
    /// `"additionalProperties": false`, as Python's check reads it.
    fn takes_extra(&self) -> bool {
        self.parameters.as_ref().is_none_or(|p| p.get("additionalProperties") != Some(&Value::Bool(false)))
    }
}

struct Checker<'a> {
    top: HashMap<String, Tool<'a>>,
    spaces: HashMap<String, HashMap<String, Tool<'a>>>,
    bound: &'a HashSet<String>,
    /// Whether names bound nowhere may still be defined (a session, or a dynamic program).
    open: bool,
}

impl<'a> Checker<'a> {
    fn new(tools: &'a [ToolDef], walk: &'a Walk, session: bool) -> Self {
        let (mut top, mut spaces) = (HashMap::new(), HashMap::<String, HashMap<String, Tool<'a>>>::new());
        for def in tools {
            let tool = Tool { def, parameters: crate::calls::approval::guest_parameters(def) };
            match &def.namespace {
                None => {
                    top.insert(ident(&def.name), tool);
                }
                Some(space) => {
                    spaces.entry(ident(space)).or_default().insert(ident(&def.name), tool);
                }
            }
        }
        Checker { top, spaces, bound: &walk.bound, open: session || walk.dynamic }
    }

    fn call(&self, call: &Call, code: &str) -> Option<String> {
        let tool = match &call.callee {
            Callee::Name(name) => self.named(name, call.awaited)?,
            Callee::Member(space, attr) => self.member(space, attr, call.awaited)?,
        };
        let tool = match tool {
            Ok(tool) => tool,
            Err(problem) => return Some(problem),
        };
        if call.alone && !call.awaited {
            let text = &code[call.span.lo.0 as usize - 1..call.span.hi.0 as usize - 1];
            let text = if text.chars().count() <= 60 { text.to_owned() } else { format!("{}(...)", tool.code_name()) };
            return Some(format!(
                "{text} is not awaited, so its result and its errors would be lost: write `await {text}`"
            ));
        }
        arguments(tool, &call.args)
    }

    /// The tool `name(...)` calls (`Some(Ok)`), or its problem (`Some(Err)`), or `None`.
    fn named(&self, name: &str, awaited: bool) -> Option<Result<&Tool<'a>, String>> {
        if self.bound.contains(name) {
            return None;
        }
        if let Some(tool) = self.top.get(name) {
            return Some(Ok(tool));
        }
        if self.open || GLOBALS.contains(&name) || self.spaces.contains_key(name) {
            return None;
        }
        if let Some(close) = closest(name, self.top.keys(), 0.8) {
            return Some(Err(format!("{name} is not defined; did you mean the tool {}?", self.top[close].declared())));
        }
        if !awaited {
            return None;
        }
        let namespaced: Vec<String> = self
            .spaces
            .iter()
            .filter(|(_, tools)| tools.contains_key(name))
            .map(|(s, _)| format!("{s}.{name}"))
            .collect();
        let hint = match namespaced.split_first() {
            Some((first, rest)) => {
                let also = if rest.is_empty() { String::new() } else { format!(" (also: {})", rest.join(", ")) };
                format!("it is a tool in a namespace: call it as `await {first}({{...}})`{also}")
            }
            None => format!("no tool has that name: {}", self.overview()),
        };
        Some(Err(format!("{name} is not defined; {hint}")))
    }

    fn member(&self, space: &str, attr: &str, awaited: bool) -> Option<Result<&Tool<'a>, String>> {
        if self.bound.contains(space) || attr.starts_with('_') {
            return None;
        }
        let Some(members) = self.spaces.get(space) else {
            let unknown = awaited && !self.open && !GLOBALS.contains(&space) && !self.top.contains_key(space);
            return unknown
                .then(|| Err(format!("{space} is not defined; no tool namespace has that name: {}", self.overview())));
        };
        if let Some(tool) = members.get(attr) {
            return Some(Ok(tool));
        }
        let hint = closest(attr, members.keys(), 0.75)
            .map(|close| format!("; did you mean {}?", members[close].declared()))
            .unwrap_or_default();
        Some(Err(format!("{space} has no tool {attr:?}{hint}; its tools are: {}", listing(members.keys(), 30))))
    }

    /// What the program's tools are, in one bounded line.
    fn overview(&self) -> String {
        let mut parts = Vec::new();
        if !self.top.is_empty() {
            parts.push(format!("the program's tools are {}", listing(self.top.keys(), OVERVIEW_NAMES)));
        }
        if !self.spaces.is_empty() {
            let mut spaces: Vec<(&String, usize)> = self.spaces.iter().map(|(s, t)| (s, t.len())).collect();
            spaces.sort();
            let shown: Vec<String> = spaces
                .iter()
                .take(OVERVIEW_NAMES)
                .map(|(s, n)| format!("{s} ({n} tool{})", if *n > 1 { "s" } else { "" }))
                .collect();
            let more = if spaces.len() > OVERVIEW_NAMES {
                format!(", … and {} more", spaces.len() - OVERVIEW_NAMES)
            } else {
                String::new()
            };
            let whose = if self.top.is_empty() { "the program's" } else { "its" };
            parts.push(format!("{whose} tool namespaces are {}{more}", shown.join(", ")));
        }
        parts.join("; ")
    }
}

/// The problem of a call's arguments, if it has one the check can be sure of.
fn arguments(tool: &Tool<'_>, args: &[ast::ExprOrSpread]) -> Option<String> {
    if args.iter().any(|a| a.spread.is_some()) {
        return None;
    }
    let name = tool.code_name();
    let fix = |what: String| Some(format!("{name}() {what}: {}", tool.declared()));
    let object = match args {
        [] => None,
        [one] => match unparenthesised(&one.expr) {
            ast::Expr::Object(object) => Some(object),
            other => {
                return literal_type(other)
                    .and_then(|kind| fix(format!("takes one object of arguments, not {}", named(kind))));
            }
        },
        more => return fix(format!("takes one object of arguments, not {}", more.len())),
    };
    let mut given = HashMap::new();
    if let Some(object) = object {
        for prop in &object.props {
            let ast::PropOrSpread::Prop(prop) = prop else { return None };
            let (key, value) = match &**prop {
                ast::Prop::KeyValue(kv) => match &kv.key {
                    ast::PropName::Ident(k) => (k.sym.to_string(), Some(&*kv.value)),
                    ast::PropName::Str(k) => (k.value.to_atom_lossy().to_string(), Some(&*kv.value)),
                    _ => return None,
                },
                ast::Prop::Shorthand(k) => (k.sym.to_string(), None),
                _ => return None,
            };
            given.insert(key, value);
        }
    }
    let properties = tool.properties();
    if !tool.takes_extra() {
        let props = properties.map_or_else(Vec::new, |p| p.keys().map(String::as_str).collect());
        let mut keys: Vec<&String> = given.keys().collect();
        keys.sort();
        if let Some(unknown) = keys.into_iter().find(|k| !props.contains(&k.as_str())) {
            let hint = closest(unknown, props.iter().copied(), 0.6)
                .map(|c| format!(" (did you mean {c:?}?)"))
                .unwrap_or_default();
            return fix(format!("takes no argument {unknown:?}{hint}"));
        }
    }
    let missing: Vec<String> =
        tool.required().into_iter().filter(|r| !given.contains_key(*r)).map(|r| format!("{r:?}")).collect();
    if !missing.is_empty() {
        let s = if missing.len() > 1 { "s" } else { "" };
        return fix(format!("is missing the required argument{s} {}", missing.join(", ")));
    }
    let mut given: Vec<(&String, &ast::Expr)> = given.iter().filter_map(|(k, v)| Some((k, (*v)?))).collect();
    given.sort_by_key(|(k, _)| *k);
    for (key, value) in given {
        let (Some(kind), Some(schema)) = (literal_type(unparenthesised(value)), properties.and_then(|p| p.get(key)))
        else {
            continue;
        };
        if accepts(schema, kind) == Some(false) {
            let wanted: Vec<&str> = types(schema).unwrap_or_default().into_iter().map(named).collect();
            return fix(format!("takes {} as {key:?}, not {}", wanted.join(" or "), named(kind)));
        }
    }
    None
}

fn unparenthesised(expr: &ast::Expr) -> &ast::Expr {
    match expr {
        ast::Expr::Paren(p) => unparenthesised(&p.expr),
        e => e,
    }
}

/// What a JSON type is called in a refusal.
fn named(kind: &str) -> &str {
    match kind {
        "string" => "a string",
        "boolean" => "a boolean (true or false)",
        "integer" => "an integer",
        "number" => "a number",
        "null" => "null",
        "array" => "an array",
        "object" => "an object",
        other => other,
    }
}

/// The JSON type of a literal, if the expression is one.
fn literal_type(expr: &ast::Expr) -> Option<&'static str> {
    Some(match expr {
        ast::Expr::Lit(ast::Lit::Str(_)) | ast::Expr::Tpl(_) => "string",
        ast::Expr::Lit(ast::Lit::Bool(_)) => "boolean",
        ast::Expr::Lit(ast::Lit::Null(_)) => "null",
        ast::Expr::Lit(ast::Lit::Num(n)) if n.value.fract() == 0.0 => "integer",
        ast::Expr::Lit(ast::Lit::Num(_)) => "number",
        ast::Expr::Array(_) => "array",
        ast::Expr::Object(_) => "object",
        _ => return None,
    })
}

/// Whether a property's schema takes a value of JSON type `kind`; `None`: it cannot say.
fn accepts(schema: &Value, kind: &str) -> Option<bool> {
    if ["anyOf", "oneOf", "allOf", "$ref", "not", "if"].iter().any(|k| schema.get(k).is_some()) {
        return None;
    }
    let types = types(schema).filter(|t| !t.is_empty())?;
    Some(types.contains(&kind) || (kind == "integer" && types.contains(&"number")))
}

/// The JSON types a property's schema names (`"type"`, one or a list of them); `None`: it
/// names none, or not only names.
fn types(schema: &Value) -> Option<Vec<&str>> {
    match schema.as_object()?.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => ts.iter().map(Value::as_str).collect(),
        _ => None,
    }
}

fn listing<'n>(names: impl Iterator<Item = &'n String>, limit: usize) -> String {
    let mut names: Vec<&String> = names.collect();
    names.sort();
    let shown: Vec<&str> = names.iter().take(limit).map(|n| n.as_str()).collect();
    let more = if names.len() > limit { format!(", … and {} more", names.len() - limit) } else { String::new() };
    if names.is_empty() { "none".into() } else { format!("{}{more}", shown.join(", ")) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tools() -> Vec<ToolDef> {
        let weather = json!({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                             "required": ["city"], "additionalProperties": false});
        let query = json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]});
        vec![
            ToolDef::new("get_weather").with_parameters(weather),
            ToolDef::new("search_issues").with_namespace("github").with_parameters(query.clone()),
            ToolDef::new("create_issue").with_namespace("github"),
            ToolDef::new("search").with_namespace("web-search").with_parameters(query),
        ]
    }

    fn check(code: &str) -> Vec<(usize, usize, String)> {
        problems(code, &tools(), false)
    }

    #[test]
    fn calls_that_can_work_pass() {
        for code in [
            "const w = await get_weather({city: 'Oslo', days: 3});\nconsole.log(w)",
            "await Promise.all([github.search_issues({query: 'x'}), web_search.search({query: 'y'})])",
            "const city = 'Oslo'; await get_weather({city})",
            "const args = {city: 1}; await get_weather(args)",
            "try { await get_weather({}) } catch (e) { console.log(e.message) }",
            "await fetch('https://example.com'); await fs.readFile('a')",
            "function get_wether() {}\nawait get_wether()",
            "await github.create_issue({anything: 1})",
            "await get_weather({city: 'Oslo', ...rest})",
            "const x = (",
            "return await github.search_issues({query: `q ${1}`})",
        ] {
            assert_eq!(check(code), vec![], "{code}");
        }
    }

    #[test]
    fn calls_that_cannot_work_are_refused_at_their_lines() {
        let found = check("const a = 1;\n  await github.create_isue({})");
        assert_eq!((found[0].0, found[0].1), (2, 9), "{found:?}");
        assert!(
            found[0].2.starts_with("github has no tool \"create_isue\"; did you mean github.create_issue(args?: "),
            "{found:?}"
        );
        let found = check("await get_wether({city: 'Oslo'})");
        assert!(
            found[0].2.contains(
                "get_wether is not defined; did you mean the tool get_weather(args: { city: string; days?: number })"
            ),
            "{found:?}"
        );
        let found = check("await search({query: 'x'})");
        assert!(
            found[0].2.contains("it is a tool in a namespace: call it as `await web_search.search({...})`"),
            "{found:?}"
        );
        let found = check("await jira.create({})");
        assert!(found[0].2.starts_with("jira is not defined; no tool namespace has that name: the program's tools are get_weather; its tool namespaces are github (2 tools), web_search (1 tool)"), "{found:?}");
        let found = check("await get_weather({city: 'Oslo', dayz: 3})");
        assert!(
            found[0].2.starts_with("get_weather() takes no argument \"dayz\" (did you mean \"days\"?)"),
            "{found:?}"
        );
        let found = check("await get_weather({days: 3})");
        assert!(found[0].2.starts_with("get_weather() is missing the required argument \"city\""), "{found:?}");
        let found = check("await get_weather({city: 'Oslo', days: '3'})");
        assert!(found[0].2.starts_with("get_weather() takes an integer as \"days\", not a string"), "{found:?}");
        let found = check("await get_weather('Oslo')");
        assert!(found[0].2.starts_with("get_weather() takes one object of arguments, not a string"), "{found:?}");
        let found = check("get_weather({city: 'Oslo'});");
        assert!(found[0].2.starts_with("get_weather({city: 'Oslo'}) is not awaited"), "{found:?}");
    }

    #[test]
    fn a_session_or_a_dynamic_program_may_define_what_it_does_not_declare() {
        assert_eq!(problems("await helper()", &tools(), true), vec![]);
        assert_eq!(check("globalThis.helper = async () => 1;\nawait helper()"), vec![]);
        assert_eq!(check("await helper()").len(), 1);
        // What the program's tools are is checked in a session too.
        assert_eq!(problems("await github.nope({})", &tools(), true).len(), 1);
    }

    #[test]
    fn the_refusal_throws_where_the_first_problem_is_and_lists_them() {
        let code = "let a = 1;\nawait github.nope({});\nawait get_weather({})";
        let thrower = refusal(code, &tools(), false).unwrap();
        assert!(
            thrower.starts_with("throw Object.assign(new SyntaxError(\"the program was not run: its tool calls cannot"),
            "{thrower}"
        );
        assert!(
            thrower.contains("\\n  line 2: github has no tool")
                && thrower.contains("\\n  line 3: get_weather() is missing"),
            "{thrower}"
        );
        assert!(
            thrower.ends_with("{ name: \"ToolCheckError\", stack: \"    at <eval> (program.js:2:7)\" });"),
            "{thrower}"
        );
        assert_eq!(refusal("await get_weather({city: 'x'})", &tools(), false), None);
        assert_eq!(refusal("await nope()", &[], false), None);
    }
}
