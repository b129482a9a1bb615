//! Where a request leaves its run: paused (its journal's new entries saved, the live
//! execution kept, a token signed for the pause), or ended.

use ptc_engine::{ApprovalRequest, Completion, Failure, JournalTake, ToolCall};

use super::paused::{Paused, Stop, advance};
use super::{Continuations, Turn};
use crate::cluster::{Saving, Segment};
use crate::core::runs::Run;
use crate::core::token::{Claims, ttl_until};

/// Runs `paused` on to its next stop, and keeps it there or ends it.
pub(super) async fn advance_to_turn(continuations: &Continuations, mut paused: Paused) -> Turn {
    let stop = advance(&mut paused.run.execution).await;
    continuations.answer(paused, stop).await
}

impl Continuations {
    /// Where `paused`, run on to `stop`, is left: paused for tools (kept, with a token), or
    /// ended.
    pub(super) async fn answer(&self, mut paused: Paused, stop: Stop) -> Turn {
        match stop {
            Stop::Calls(round, calls, approvals) => {
                paused.round = round;
                self.pause(paused, calls, approvals).await
            }
            Stop::Ended(end) => {
                // Its journal is in the store once a pause saved it (the header went with it).
                if paused.journaled && paused.header.is_none() {
                    let _ = self.cluster.store.forget(&paused.id).await;
                }
                self.forget_image(&paused.id);
                ended(&paused.run, end).await
            }
        }
    }

    /// Keeps the paused execution and signs a token for its round. The file quota is checked
    /// first: a program that wrote past it while running is stopped here rather than kept
    /// paused. With a shared store, what its journal recorded since the last pause is saved
    /// first, so that any node can resume it with the token.
    async fn pause(&self, mut paused: Paused, calls: Vec<ToolCall>, approvals: Vec<ApprovalRequest>) -> Turn {
        if !paused.run.within_quota().await {
            // Cancelled for it: its end follows.
            loop {
                if let Stop::Ended(end) = advance(&mut paused.run.execution).await {
                    return ended(&paused.run, end).await;
                }
            }
        }
        if paused.journaled {
            self.save_journal(&mut paused).await;
        }
        let cluster = &self.cluster;
        let claims = Claims {
            execution_id: paused.id.clone(),
            tenant: paused.tenant.clone(),
            session_id: paused.session_id.clone(),
            round: paused.round,
            expires_at_ms: paused.expires_at_ms,
            node: if cluster.is_single() { String::new() } else { cluster.node.clone() },
        };
        let token = self.signer.sign(&claims);
        let session_id = paused.session_id.clone();
        let _ = self.paused.insert(paused.id.clone(), paused);
        Turn::Paused { session_id, token, calls, approvals }
    }

    /// Saves what `paused`'s journal recorded since its last pause in the shared store. A
    /// python-data run has no journal: its first pause saves its header alone, and its image,
    /// kept at each hibernation, carries it on. So does a run thawed here, whose header the
    /// store has. A save that fails leaves it unjournaled.
    async fn save_journal(&self, paused: &mut Paused) {
        let control = paused.run.execution.control();
        let Some(take) = control.take_journal().or_else(|| paused.header.is_some().then(JournalTake::default)) else {
            return;
        };
        let cluster = &self.cluster;
        let ttl = ttl_until(paused.expires_at_ms);
        let saved = match take.lost {
            Some(why) => Err(why),
            None => {
                let segment = serde_json::to_vec(&take.entries).expect("entries serialise");
                let header = paused.header.as_deref();
                let (id, tenant, round) = (&paused.id, &paused.tenant, paused.round);
                let segment = Segment { id, tenant, header, entries: &segment, round };
                match cluster.store.save(segment, &cluster.node, ttl).await {
                    Ok(Saving::Saved) => Ok(()),
                    Ok(Saving::Refused(why)) => {
                        metrics::counter!("ptc_journal_refused_total").increment(1);
                        Err(why)
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        match saved {
            Ok(()) => paused.header = None,
            Err(why) => {
                // A journal with a gap could replay wrongly: it is dropped whole. The execution
                // still runs here; only a loss of this node would now lose it too.
                tracing::warn!(execution = %paused.id, "no longer journaled: {why}");
                metrics::counter!("ptc_journal_save_failures_total").increment(1);
                paused.journaled = false;
                let _ = cluster.store.forget(&paused.id).await;
            }
        }
    }
}

/// The turn of a run that has ended: its outcome and files, once settled.
pub(super) async fn ended(run: &Run, end: Result<Completion, Failure>) -> Turn {
    let session_id = run.session_id().unwrap_or_default().to_string();
    Turn::Ended { session_id, ending: run.end(end, None).await }
}
