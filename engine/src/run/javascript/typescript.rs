//! TypeScript programs ([`Runtime::Typescript`](crate::api::request::Runtime)): their types
//! erased on the host before the JavaScript guest runs them, by swc's strip-only mode (the
//! code Node's `amaro` runs). It writes whitespace of the same width where the types were, so
//! every line and column of the JavaScript is the program's own and errors need no source
//! map. What cannot be erased (an `enum`, a constructor's parameter properties, a namespace
//! with values) is refused, as is what does not parse: the guest then runs a program that
//! throws that `SyntaxError` with its line and column, so that it reaches the caller as any
//! program's error would (a session goes on).
//!
//! Measured in a scratch crate (swc_ts_fast_strip 60.0.0): 484 µs for the first program of a
//! process, 11 µs for each after it.

use std::sync::{Arc, Mutex};

use swc_common::errors::{DiagnosticBuilder, Emitter, Handler};
use swc_common::sync::Lrc;
use swc_common::{BytePos, GLOBALS, Globals, SourceMap};

/// The program is stripped as the body of an async function, where `await` and `return` are
/// allowed at its top level (a script would refuse both); the wrapper is plain JavaScript,
/// which the stripper leaves as it is.
const BEFORE: &str = "async function __ptc_program() {";
const AFTER: &str = "\n}";

/// `code` as the JavaScript the guest runs: its types erased, or, when it cannot be, a
/// program that throws the reason where it lies.
pub(crate) fn to_javascript(code: &str) -> String {
    match strip(code) {
        Ok(javascript) => javascript,
        Err(Refusal { line, column, message }) => super::thrower::thrower("SyntaxError", &message, line, column),
    }
}

/// Why a program's types could not be erased, and where (1-based).
#[derive(Debug, PartialEq)]
struct Refusal {
    line: usize,
    column: usize,
    message: String,
}

/// One diagnostic swc reports: where it is, and its words.
type Diagnostic = (Option<BytePos>, String);

/// The diagnostics swc reports.
#[derive(Clone, Default)]
struct Collected(Arc<Mutex<Vec<Diagnostic>>>);

impl Emitter for Collected {
    fn emit(&mut self, db: &mut DiagnosticBuilder<'_>) {
        let at = db.span.primary_span().map(|span| span.lo);
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push((at, db.message()));
    }
}

fn strip(code: &str) -> Result<String, Refusal> {
    let collected = Collected::default();
    let map: Lrc<SourceMap> = Default::default();
    let handler = Handler::with_emitter(false, false, Box::new(collected.clone()));
    let wrapped = format!("{BEFORE}{code}{AFTER}");
    let options = swc_ts_fast_strip::Options { module: Some(false), ..Default::default() };
    let stripped = GLOBALS.set(&Globals::new(), || swc_ts_fast_strip::operate(&map, &handler, wrapped, options));
    let refused = |fallback: String| {
        let first = collected.0.lock().unwrap_or_else(|e| e.into_inner()).first().cloned();
        let (at, message) = first.unwrap_or((None, fallback));
        let (line, column) = at.map_or((1, 1), |pos| {
            let loc = map.lookup_char_pos(pos);
            (loc.line, loc.col.0 + 1)
        });
        // The wrapper shares the first line with the program.
        let column = if line == 1 { column.saturating_sub(BEFORE.len()).max(1) } else { column };
        Refusal { line, column, message: worded(&message) }
    };
    match stripped {
        Ok(output) => output
            .code
            .strip_prefix(BEFORE)
            .and_then(|rest| rest.strip_suffix(AFTER))
            .map(str::to_owned)
            .ok_or_else(|| refused("TypeScript: the program could not be read".into())),
        Err(e) => Err(refused(e.message)),
    }
}

/// swc's words, with what to write instead where the program used what cannot be erased.
fn worded(message: &str) -> String {
    let hint = if message.contains("enum") {
        " (types are erased, not compiled: write the enum as an object of constants)"
    } else if message.contains("parameter propert") {
        " (types are erased, not compiled: assign the parameters in the constructor's body)"
    } else if message.contains("namespace") || message.contains("module") {
        " (types are erased, not compiled: use an object instead of a namespace with values)"
    } else {
        ""
    };
    format!("TypeScript: {message}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_become_whitespace_and_every_line_keeps_its_length() {
        let code = "interface P { a: number }\nconst p: P = { a: 1 } as P;\nfunction f<T>(x: T): T { return x; }\n\
                    const r = await g({ a: p.a });\nreturn f<number>(r);";
        let js = strip(code).unwrap();
        assert_eq!(js.lines().count(), code.lines().count());
        for (a, b) in js.lines().zip(code.lines()) {
            assert_eq!(a.len(), b.len(), "{a:?} for {b:?}");
        }
        assert!(js.contains("const p    = { a: 1 }     ;"), "{js}");
        assert!(js.contains("return f        (r);"), "{js}");
        assert!(!js.contains("interface"), "{js}");
    }

    #[test]
    fn what_cannot_be_erased_or_read_is_refused_where_it_is() {
        let refused = strip("const a = 1;\nenum Color { Red }\n").unwrap_err();
        assert_eq!((refused.line, refused.column), (2, 1), "{refused:?}");
        assert!(refused.message.contains("enum") && refused.message.contains("object of constants"), "{refused:?}");
        let refused = strip("let x: number = ;").unwrap_err();
        assert_eq!((refused.line, refused.column), (1, 17), "{refused:?}");
        let thrower = to_javascript("let a = 1;\nlet x: number = ;");
        assert!(thrower.starts_with("throw Object.assign(new SyntaxError(\"TypeScript: "), "{thrower}");
        assert!(thrower.ends_with("stack: \"    at <eval> (program.js:2:17)\" });"), "{thrower}");
    }
}
