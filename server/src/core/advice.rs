//! What a model is told when its program fails: a headline, and a hint that says what
//! happened and what to do. Every front end words a failure with these.
//!
//! The headlines are LibreChat's: its client shows a model only `stderr` and a fixed set of
//! `error` strings (`Time limit exceeded`, `Out of memory`, `Sandbox exited with code N`,
//! `Execution failed or timed out`), so the HTTP API puts the hint in `stderr`; the MCP front
//! end shows both.

use ptc_engine::{Failure, FailureKind};

/// A failed program, in words for a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// One of the fixed strings above, or the failure's own message.
    pub headline: String,
    /// What happened and what to do; empty when the headline or `stderr` says it already.
    pub hint: String,
}

/// The catch-all headline.
pub const FAILED: &str = "Execution failed or timed out";

pub fn advice(f: &Failure) -> Advice {
    let said = |headline: &str, hint: String| Advice { headline: headline.to_string(), hint };
    match f.kind {
        FailureKind::Timeout => said(
            "Time limit exceeded",
            format!(
                "{}: the program (tool waits included) ran out of time; do less per execution or ask for a longer timeout.",
                f.message
            ),
        ),
        FailureKind::Fuel => {
            said("Time limit exceeded", "The program used up its CPU budget; make it do less work.".to_string())
        }
        FailureKind::Memory => {
            said("Out of memory", format!("{}; use less memory (process data in smaller pieces).", f.message))
        }
        FailureKind::Exit => {
            let code = f.exit_code.unwrap_or(1);
            said(&format!("Sandbox exited with code {code}"), format!("The program called sys.exit({code})."))
        }
        FailureKind::RoundTrips => said(
            FAILED,
            format!(
                "{}: batch independent tool calls (asyncio.gather in Python, Promise.all in JavaScript) so that each \
                 round asks for many at once.",
                f.message
            ),
        ),
        FailureKind::ToolCalls => {
            said(FAILED, format!("{}: call tools fewer times (filter or aggregate first).", f.message))
        }
        FailureKind::Cancelled => said(FAILED, "The execution was cancelled.".to_string()),
        // The traceback (or, for a C-stack overflow, the engine's line) is in stderr already,
        // unless the output limit cut it off.
        FailureKind::PythonError => {
            let hint = if f.stderr.contains(&f.message) { String::new() } else { f.message.clone() };
            said(&f.message, hint)
        }
        _ => said(&f.message, String::new()),
    }
}

/// `stderr` with `hint` on a line of its own after it.
pub fn with_hint(stderr: &str, hint: &str) -> String {
    if hint.is_empty() {
        return stderr.to_string();
    }
    let sep = if stderr.is_empty() || stderr.ends_with('\n') { "" } else { "\n" };
    format!("{stderr}{sep}{hint}\n")
}

/// What the model is told when a run left its tenant over the file quota (`why`, the store's
/// words): what to do, and if the program was stopped mid-way for it, that it was, and that
/// the live session it ran in (if any) has ended with it.
pub fn over_quota(why: &str, stopped: bool, in_live_session: bool) -> String {
    let stopped = match (stopped, in_live_session) {
        (false, _) => "",
        (true, false) => " The program was stopped mid-way for it.",
        (true, true) => " The program was stopped mid-way for it, so its session has ended.",
    };
    format!("{why}. Write less to /mnt/data or delete files you no longer need.{stopped}")
}
