//! A continuation resumes its execution: the client's results and decisions checked against
//! the calls waiting for them, the round claimed (once, across the cluster), the execution
//! adopted as this node's, and the answers handed to it.

use std::collections::HashMap;

use ptc_engine::{Control, Decision, ErrorKind as EngineKind, Execution, ToolResult};

use super::paused::{Paused, advance};
use super::registry::Claim;
use super::{Continuations, Turn};
use crate::core::error::Error;
use crate::core::token::{Claims, ttl_until};

/// A token that is not (or no longer) this execution's: a replay or a forgery.
pub(super) fn invalid_token() -> Error {
    Error::invalid("Invalid continuation token")
}

/// An execution that has ended, or was never kept.
pub(super) fn expired() -> Error {
    Error::invalid("Execution expired")
}

impl Continuations {
    /// Resumes a paused execution, its slot claimed by this request (`guard`), with the
    /// client's results and decisions.
    pub(super) async fn resume_held(
        &self,
        tenant: &str,
        claims: &Claims,
        mut guard: Claim<Paused>,
        results: Vec<ToolResult>,
        decisions: Vec<Decision>,
    ) -> Result<Turn, Error> {
        // Emptied by a request that resumed it before this one: a replay of the same token.
        let Some(paused) = guard.as_mut() else { return Err(invalid_token()) };
        if paused.round != claims.round || paused.tenant != tenant {
            return Err(invalid_token());
        }

        // Everything is checked before anything is applied: a refused request leaves the
        // paused execution exactly as it was.
        let pending = paused.pending();
        let decided = decisions_for(&paused.held(), decisions)?;
        let control = paused.run.execution.control();
        // Checked (changed arguments against the tool's schema) before anything is applied.
        let decided = control.check_decisions(decided).await.map_err(|e| Error::invalid(e.message()))?;
        let answers = results_for(&pending, results)?;
        if paused.journaled {
            self.claim_round(paused).await?;
        }
        if let Some(counter) = paused.adopted.take() {
            self.adopt(paused, counter).await;
        }
        apply(&paused.run.execution, &control, &pending, answers, &decided)?;

        let mut paused = guard.take().expect("checked above");
        // In the registry, locked, while it runs: a second request on the token is refused.
        let stop = advance(&mut paused.run.execution).await;
        self.paused.remove(&claims.execution_id);
        drop(guard);
        Ok(self.answer(paused, stop).await)
    }

    /// Claims the round of a journaled execution in the store: a token resumes once across
    /// the cluster, and another node may have replayed this round. A lost claim refuses the
    /// token.
    async fn claim_round(&self, paused: &Paused) -> Result<(), Error> {
        match self.cluster.claim(&paused.id, paused.round, ttl_until(paused.expires_at_ms)).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(invalid_token()),
            // The store cannot be reached from here: this node's lock on the paused execution
            // makes the round single-use here. A node that does reach the store could still
            // replay the same round from the journal saved before (docs/cluster.md: "Tokens
            // resume once across nodes").
            Err(e) => {
                tracing::warn!("claiming a round: {e}; resuming it under this node's lock alone");
                Ok(())
            }
        }
    }

    /// A continuation's round of an execution taken over here is claimed: it is this node's
    /// now (its owner in the store, and counted as a thaw or a replay of its tenant).
    async fn adopt(&self, paused: &Paused, counter: &'static str) {
        let cluster = &self.cluster;
        let ttl = ttl_until(paused.expires_at_ms);
        if let Err(e) = cluster.store.set_owner(&paused.id, &cluster.node, paused.round, ttl).await {
            tracing::warn!("naming the new owner: {e}");
        }
        let _ = cluster.store.add_usage(&paused.tenant, counter, 1).await;
    }
}

/// The client's decisions, when they decide exactly the calls `held` for one (each once);
/// otherwise the request is refused, naming the call.
fn decisions_for(held: &[String], decisions: Vec<Decision>) -> Result<Vec<Decision>, Error> {
    let mut decided: Vec<Decision> = Vec::with_capacity(decisions.len());
    for d in decisions {
        if !held.contains(&d.id) {
            return Err(Error::invalid(format!(
                "call_id {:?} in decisions does not wait for a decision: decide only the calls listed in approvals",
                d.id
            )));
        }
        if decided.iter().any(|x| x.id == d.id) {
            return Err(Error::invalid(format!("call_id {:?} is decided twice", d.id)));
        }
        decided.push(d);
    }
    let undecided: Vec<&str> =
        held.iter().filter(|h| !decided.iter().any(|d| &d.id == *h)).map(String::as_str).collect();
    if !undecided.is_empty() {
        return Err(Error::invalid(format!("Missing decisions for: {}", undecided.join(", "))));
    }
    Ok(decided)
}

/// The client's tool results by call id, when they answer exactly the `pending` calls (each
/// once); otherwise the request is refused, naming the call.
fn results_for(pending: &[String], results: Vec<ToolResult>) -> Result<HashMap<String, ToolResult>, Error> {
    let mut answers: HashMap<String, ToolResult> = HashMap::new();
    for r in results {
        let id = r.id.clone();
        if !pending.contains(&id) {
            return Err(Error::invalid(format!(
                "Unknown call_id {id:?}: it is not a pending tool call of this execution"
            )));
        }
        if answers.insert(id.clone(), r).is_some() {
            return Err(Error::invalid(format!("call_id {id:?} is answered twice")));
        }
    }
    let missing: Vec<&str> = pending.iter().filter(|p| !answers.contains_key(*p)).map(String::as_str).collect();
    if !missing.is_empty() {
        return Err(Error::invalid(format!("Missing tool results for: {}", missing.join(", "))));
    }
    Ok(answers)
}

/// Hands the checked `answers` (in the order of the `pending` calls) and `decided` calls to
/// the execution; one that has ended meanwhile is "Execution expired".
fn apply(
    execution: &Execution,
    control: &Control,
    pending: &[String],
    mut answers: HashMap<String, ToolResult>,
    decided: &[Decision],
) -> Result<(), Error> {
    let ordered: Vec<ToolResult> = pending.iter().filter_map(|p| answers.remove(p)).collect();
    // Results first, then decisions: the program takes what arrived before it is told about
    // approved calls, so that the next pause finds it blocked again.
    let applied = match ordered.is_empty() {
        true => Ok(()),
        false => execution.submit(ordered),
    }
    .and_then(|()| if decided.is_empty() { Ok(()) } else { control.apply_decisions(decided) });
    applied.map_err(|e| match e.kind() {
        EngineKind::Finished => expired(),
        _ => Error::from(e),
    })
}
