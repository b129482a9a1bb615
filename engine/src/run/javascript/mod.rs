//! What the host does for the JavaScript runtime before its guest runs a program: erases a
//! TypeScript program's types (`typescript.rs`) and checks the program's tool calls against
//! the tools (`check.rs`). The tools' TypeScript declarations, which the check's refusals and
//! `describe_tools` show, are `ptc-js-declarations`'s (the guest's `search_tools` renders
//! them with the same crate).

pub(crate) mod check;
pub(crate) mod typescript;

use crate::api::request::{Runtime, ToolDef};

/// `code` as `runtime`'s instances take it: a TypeScript program's types erased, and a
/// JavaScript program whose tool calls cannot work replaced by one that throws why. `session`:
/// a live session's program.
pub(crate) fn program(runtime: Runtime, code: String, tools: &[ToolDef], session: bool) -> String {
    let code = match runtime {
        Runtime::Typescript => typescript::to_javascript(&code),
        Runtime::Javascript => code,
        Runtime::Python | Runtime::PythonData => return code,
    };
    check::refusal(&code, tools, session).unwrap_or(code)
}

/// A program that throws a `SyntaxError` named `name` with `message`, its stack at `line` and
/// `column` of the program (1-based): what the guest runs instead of a refused program, so
/// that the refusal reaches the caller as any program's error does (and a session goes on).
fn thrower(name: &str, message: &str, line: usize, column: usize) -> String {
    let message = serde_json::to_string(message).unwrap_or_default();
    let name = serde_json::to_string(name).unwrap_or_default();
    let stack = serde_json::to_string(&format!("    at <eval> (program.js:{line}:{column})")).unwrap_or_default();
    format!("throw Object.assign(new SyntaxError({message}), {{ name: {name}, stack: {stack} }});")
}

/// A tool as `ptc-js-declarations` reads it.
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
