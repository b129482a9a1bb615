//! Results held for the program. Answers that arrive while the program runs wait here until it blocks
//! again: 120 results of 8 MB for one execution with a 64 MiB memory limit once took a server
//! +821 MiB. Results waiting may hold at most a quarter of the execution's memory limit (the
//! program receives them all at once when it next waits, into that memory, and decodes each:
//! half the limit in results once left a 64 MiB program short of memory) and are charged to the
//! memory budget (and the tenant's share) until it takes them; one that does not fit reaches
//! the program as a `ToolError` saying so, and its bytes are dropped at once.

use super::{Exchange, State};
use crate::api::config::MIB;
use crate::api::events::ToolResult;

impl Exchange {
    /// Turns an oversized or malformed success into the error the program sees.
    pub(super) fn check_result(&self, name: &str, r: &mut ToolResult) {
        let size = match &r.outcome {
            Ok(text) | Err(text) => text.len(),
        };
        if size > self.max_result_bytes {
            r.outcome = Err(format!(
                "tool {name:?} returned {size} bytes; the limit is {}: ask the tool for less (a filter, a page, fewer fields)",
                self.max_result_bytes
            ));
        } else if let Ok(json) = &r.outcome {
            let problem = match &self.observer {
                // Parsed once, for the check and the shape: at most MAX_OBSERVED_BYTES, and
                // only until the tool's shape has its samples.
                Some((shapes, tenant)) if shapes.wants(tenant, name, json.len()) => {
                    serde_json::from_str::<serde_json::Value>(json).map(|v| shapes.record(tenant, name, &v)).err()
                }
                _ => serde_json::from_str::<serde::de::IgnoredAny>(json).err(),
            };
            if let Some(e) = problem {
                r.outcome = Err(format!("tool {name:?} returned malformed JSON: {e}"));
            }
        }
    }

    /// Counts a result as waiting for the program, or turns it into the error the program sees
    /// when the results waiting would pass its memory limit or the budget refuses them.
    pub(super) fn hold_result(&self, state: &mut State, name: &str, r: &mut ToolResult) {
        let size = match &r.outcome {
            Ok(text) | Err(text) => text.len() as u64,
        };
        let refused = if state.held + size > self.max_held_bytes {
            format!(
                "{} bytes of results the program has not taken yet are waiting, and waiting results may hold a quarter \
                 of its memory limit ({} MiB)",
                state.held,
                self.max_held_bytes * 4 / MIB
            )
        } else {
            match state.claim.grow(size) {
                Ok(()) => {
                    state.held += size;
                    return;
                }
                Err(why) => why,
            }
        };
        r.outcome = Err(format!(
            "the result of tool {name:?} ({size} bytes) was dropped: {refused}; await results as they arrive, or ask \
             for less per call"
        ));
    }
}
