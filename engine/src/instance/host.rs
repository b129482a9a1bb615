//! The store's data: WASI, the memory limiter, the tool broker, the data runtime's turn; and
//! the component's `wait-for-tools` import, which the broker answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtxView, WasiView};

use crate::api::journal::{HttpReplay, Journal};
use crate::api::trace::Parent;
use crate::instance::bindings::{self, ptc::sandbox::host as wit};
use crate::instance::broker::Broker;
use crate::instance::clock::Monotonic;
use crate::instance::limiter::Limiter;
use crate::instance::outbound::Outbound;
use crate::instance::output::Output;
use crate::instance::wiring::{Wasi, Wiring};
use crate::net::{self, NetSide};

pub(crate) struct HostState {
    pub(crate) wasi: Wasi,
    pub(crate) limiter: Limiter,
    pub(crate) broker: Broker,
    /// The data runtime's turn (`data/door.rs` serves it); unused by the component.
    pub(crate) turn: TurnState,
    /// The engine's count of live instances; `None` for a warm instance's placeholder state
    /// (`warm.rs`), which is not an execution.
    live: Option<Arc<AtomicUsize>>,
    /// The engine's count of hibernated executions, while this one is (its instance is
    /// gone, so it is not live meanwhile).
    hibernated: Option<(Arc<AtomicUsize>, u64)>,
    /// The descriptors the data runtime's guest takes at its first call (WASI preview 1):
    /// stdin, stdout, stderr and its preopens; one that holds more does not hibernate to
    /// another process. 0 for the component, whose primed handles its image counts
    /// ([`crate::pages::Image`]).
    pub(crate) primed_handles: usize,
    /// A directory is preopened (`/mnt/data`): one handle more than a fresh instance primed
    /// without one holds ([`crate::pages::Image`]).
    pub(crate) preopened: bool,
    /// The component's monotonic clock, unless a journal's recorder keeps it.
    pub(crate) monotonic: Option<Monotonic>,
    /// The execution's network policy and the requests it made (`net/`).
    pub(crate) net: NetSide,
    /// The execution's span, when its engine traces: its outbound requests' spans go under it.
    pub(crate) trace: Option<Parent>,
    /// Which tool list (`GuestTools::Numbered`'s number, `tool_lists.rs`) this instance's live
    /// session holds, once a program given it got to run (0: none).
    pub(crate) tools_held: u64,
    /// What `wasi` was made from, to make it again after a hibernation let it go (`None`: a
    /// warm instance's placeholder, which never hibernates).
    pub(crate) wiring: Option<Wiring>,
    /// `wasi` was let go while hibernated (it holds no descriptor): [`HostState::rewire`]
    /// makes it again before the instance runs.
    unwired: bool,
}

/// What a host state is made of ([`HostState::new`]), whole.
pub(crate) struct Parts {
    pub(crate) wasi: Wasi,
    pub(crate) limiter: Limiter,
    pub(crate) broker: Broker,
    /// The engine's count of live instances (`None`: a warm instance's placeholder).
    pub(crate) live: Option<Arc<AtomicUsize>>,
    /// A directory is preopened (`/mnt/data`).
    pub(crate) preopened: bool,
    pub(crate) monotonic: Option<Monotonic>,
    pub(crate) net: NetSide,
    pub(crate) trace: Option<Parent>,
    pub(crate) wiring: Wiring,
}

/// One turn of the data runtime, as its door sees it: the job the guest asks for, and what
/// the guest reports back.
#[derive(Default)]
pub(crate) struct TurnState {
    pub(crate) job: Option<String>,
    pub(crate) outcome: Option<bindings::Outcome>,
    /// What a snapshot or restore job answered (`{"ok", "error", ...}`).
    pub(crate) answer: Option<serde_json::Value>,
    /// The largest frame this job may send, when larger than the door's `MAX_FRAME` (a
    /// snapshot's state).
    pub(crate) max_frame: Option<usize>,
}

impl HostState {
    pub(crate) fn output(&self) -> &Output {
        &self.broker.output
    }

    pub(crate) fn new(parts: Parts) -> Self {
        let Parts { wasi, limiter, broker, live, preopened, monotonic, net, trace, wiring } = parts;
        if let Some(live) = &live {
            live.fetch_add(1, Ordering::Relaxed);
            metrics::gauge!("ptc_live_instances").increment(1.0);
        }
        let primed_handles = match wasi {
            Wasi::P2 { .. } => 0,
            // Preview 1 takes all at the first call: stdin, stdout, stderr, and the preopens.
            Wasi::P1(_) => 3 + crate::instance::data::files::PREOPENS,
        };
        HostState {
            wasi,
            limiter,
            broker,
            turn: TurnState::default(),
            live,
            hibernated: None,
            primed_handles,
            preopened,
            monotonic,
            net,
            trace,
            tools_held: 0,
            wiring: Some(wiring),
            unwired: false,
        }
    }

    /// One HTTP request of the program's (`fetch`, or the data runtime's door): made under
    /// the execution's network policy, live or (a journal's replay) as the first run got it.
    /// The guest waits meanwhile without its run slot, as it does for tools.
    pub(crate) async fn fetch(&mut self, request: net::Request) -> Result<net::Response, net::Failure> {
        self.broker.output.flush();
        let journal = self.broker.journal.clone();
        let replay = journal.as_ref().map(|journal| journal.http(&request.method, &request.url));
        let replayed = !matches!(replay, None | Some(HttpReplay::Live));
        let span = self.trace.as_ref().map(|parent| Outbound::start(parent, &request, replayed));
        let outcome = match replay {
            Some(HttpReplay::Recorded(outcome)) => outcome,
            Some(HttpReplay::Diverged(why)) => Err(net::Failure::Failed(Journal::diverged(&why))),
            None | Some(HttpReplay::Live) => {
                self.broker.run_slot.release();
                let outcome = self.net.fetch(request.clone(), self.net.left()).await;
                self.broker.run_slot.acquire().await;
                if let Some(journal) = &journal {
                    journal.record_http(&request.method, &request.url, &outcome);
                }
                outcome
            }
        };
        if let Some(span) = span {
            span.end(&outcome);
        }
        outcome
    }

    /// What the guest's monotonic clock reads now, in nanoseconds (without recording it in a
    /// journal).
    pub(crate) fn monotonic_now(&self) -> u64 {
        match (&self.broker.journal, &self.monotonic) {
            (Some(journal), _) => journal.monotonic_now(),
            (None, Some(clock)) => clock.read(),
            (None, None) => 0,
        }
    }

    /// WASI handles the guest holds: the entries of the host's resource table.
    pub(crate) fn wasi_handles(&mut self) -> usize {
        match &mut self.wasi {
            Wasi::P2 { table, .. } => table.iter_mut().count(),
            Wasi::P1(ctx) => ctx.ctx().table.iter_mut().count(),
        }
    }

    /// The instance is gone (hibernated, in `bytes`): it no longer counts as live, but as
    /// hibernated in `count`; the handles it held go with it (a thaw takes them again), and so
    /// does its WASI context, with the descriptors it holds, unless the data runtime's guest
    /// holds more than it was primed with (an open file, whose descriptor must stay).
    pub(crate) fn asleep(&mut self, count: &Arc<AtomicUsize>, bytes: u64) {
        let handles = self.wasi_handles();
        if let Wasi::P2 { table, .. } = &mut self.wasi {
            *table = ResourceTable::new();
        }
        let only_primed = matches!(self.wasi, Wasi::P2 { .. }) || handles == self.primed_handles || handles == 0;
        if let Some(wiring) = self.wiring.as_ref().filter(|_| only_primed) {
            self.wasi = wiring.unwired();
            self.unwired = true;
        }
        if let Some(live) = &self.live {
            live.fetch_sub(1, Ordering::Relaxed);
            metrics::gauge!("ptc_live_instances").decrement(1.0);
        }
        count.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("ptc_hibernated").increment(1.0);
        metrics::gauge!("ptc_hibernated_bytes").increment(bytes as f64);
        self.hibernated = Some((count.clone(), bytes));
    }

    /// Makes the WASI context again if a hibernation let it go (before the thawed instance
    /// is primed); refused, in words, when `/mnt/data` is no longer the directory it was.
    pub(crate) fn rewire(&mut self) -> Result<(), String> {
        if let (true, Some(wiring)) = (self.unwired, &self.wiring) {
            self.wasi = wiring.rewire()?;
            self.unwired = false;
        }
        Ok(())
    }

    /// Thawed into an instance again.
    pub(crate) fn awake(&mut self) {
        if let Some(live) = &self.live {
            live.fetch_add(1, Ordering::Relaxed);
            metrics::gauge!("ptc_live_instances").increment(1.0);
        }
        self.wake_count();
    }

    fn wake_count(&mut self) {
        if let Some((count, bytes)) = self.hibernated.take() {
            count.fetch_sub(1, Ordering::Relaxed);
            metrics::gauge!("ptc_hibernated").decrement(1.0);
            metrics::gauge!("ptc_hibernated_bytes").decrement(bytes as f64);
        }
    }
}

impl HostState {
    /// The execution has ended: it no longer counts as live (or as hibernated), though its
    /// instance's memory goes back only as the store drops, after the final event went out
    /// (`run/job.rs`). The store's drop does the same for an execution that did not say so.
    pub(crate) fn ended(&mut self) {
        if self.hibernated.is_some() {
            // It ended while hibernated: it was counted there, not as live.
            self.wake_count();
            self.live = None;
            return;
        }
        if let Some(live) = self.live.take() {
            live.fetch_sub(1, Ordering::Relaxed);
            metrics::gauge!("ptc_live_instances").decrement(1.0);
        }
    }
}

impl Drop for HostState {
    /// The store (and with it the instance) is gone: this is what "freed" means in tests.
    fn drop(&mut self) {
        self.ended();
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        match &mut self.wasi {
            Wasi::P2 { ctx, table } => WasiCtxView { ctx, table },
            Wasi::P1(_) => unreachable!("preview 2 is linked only for the component, whose stores have it"),
        }
    }
}

impl wit::Host for HostState {
    async fn fetch(
        &mut self,
        request: wit::HttpRequest,
    ) -> wasmtime::Result<Result<wit::HttpResponse, wit::HttpError>> {
        let request = net::Request {
            method: request.method,
            url: request.url,
            headers: request.headers,
            body: request.body,
            timeout: request.timeout_ms.map(std::time::Duration::from_millis),
        };
        Ok(match HostState::fetch(self, request).await {
            Ok(r) => Ok(wit::HttpResponse { status: r.status, reason: r.reason, headers: r.headers, body: r.body }),
            Err(net::Failure::Refused(m)) => Err(wit::HttpError::Refused(m)),
            Err(net::Failure::Failed(m)) => Err(wit::HttpError::Failed(m)),
            Err(net::Failure::TimedOut(m)) => Err(wit::HttpError::TimedOut(m)),
        })
    }

    async fn wait_for_tools(
        &mut self,
        calls: Vec<wit::ToolCall>,
        timeout_ms: Option<u64>,
    ) -> wasmtime::Result<wit::WaitAnswer> {
        self.broker.wait_for_tools(calls, timeout_ms).await
    }
}
