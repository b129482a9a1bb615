//! What the host does for the JavaScript runtime before its guest runs a program: erases a
//! TypeScript program's types (`typescript.rs`) and checks the program's tool calls against
//! the tools (`check.rs`). The tools' TypeScript declarations, which the check's refusals and
//! `describe_tools` show, are `ptc-js-declarations`'s (the guest's `search_tools` renders
//! them with the same crate).

pub(crate) mod check;
mod thrower;
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
