//! What the guest runs instead of a program the host refused (its types could not be erased,
//! or its tool calls cannot work): a program that throws the refusal, so that it reaches the
//! caller as any program's error does (and a session goes on).

/// A program that throws a `SyntaxError` named `name` with `message`, its stack at `line` and
/// `column` of the program (1-based): what the guest runs instead of a refused program, so
/// that the refusal reaches the caller as any program's error does (and a session goes on).
pub(super) fn thrower(name: &str, message: &str, line: usize, column: usize) -> String {
    let message = serde_json::to_string(message).unwrap_or_default();
    let name = serde_json::to_string(name).unwrap_or_default();
    let stack = serde_json::to_string(&format!("    at <eval> (program.js:{line}:{column})")).unwrap_or_default();
    format!("throw Object.assign(new SyntaxError({message}), {{ name: {name}, stack: {stack} }});")
}
