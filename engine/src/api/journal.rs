//! Journals: everything an execution took from outside its sandbox, so that another instance,
//! on another machine after the first is gone, can run the same program again to the same
//! point and carry on live.
//!
//! A program's only inputs besides its request are the sandbox's random sources, its clocks and
//! the answers to its tool calls (stdin and the environment are empty; `/mnt/data` is the
//! caller's to keep as it was). A journaled execution therefore draws its random bytes from a
//! generator seeded by [`Journal::seed`], and records, in the order they happen, every clock
//! reading and every `wait-for-tools`: the calls the guest made and the results it was given.
//! Replaying hands the recorded readings and results back in order, instantly, and checks that
//! each batch of calls is the recorded one (ids, names, inputs); a program that does not repeat
//! itself fails with [`crate::api::events::FailureKind::Diverged`], naming the round, never silently
//! differently. Once the recorded entries are used up, the clocks and tools are live again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

use opentelemetry::KeyValue;
use opentelemetry::global::BoxedSpan;
use opentelemetry::trace::{Span, SpanKind, Status};

use crate::api::events::{ApprovalRequest, Decision, ToolResult, Verdict};
use crate::api::trace::Parent;
use crate::net::{Failure, Response};

/// What a journaled execution starts from: its seed, and what an earlier run of the same
/// request recorded (nothing, the first time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// Seeds the sandbox's random sources (`os.urandom`, `random`, `uuid`, `secrets`).
    pub seed: [u8; 32],
    /// Entries an earlier run recorded, to be given back in order.
    pub entries: Vec<Entry>,
}

impl Journal {
    /// A first run: a fresh seed from the OS, nothing to replay.
    pub fn new() -> Self {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("the OS random source");
        Journal { seed, entries: Vec::new() }
    }

    /// A replay of `entries`, recorded by a run started with `seed`.
    pub fn replay(seed: [u8; 32], entries: Vec<Entry>) -> Self {
        Journal { seed, entries }
    }

    /// What a client is told when a replay does not repeat the first run: `why`, and what to do.
    pub fn diverged(why: &str) -> String {
        format!(
            "this execution's server was lost, and resuming it elsewhere ran the program again with its \
             recorded tool results, but the program did not repeat itself ({why}); it reads something that \
             changes between runs. Run it again from the start"
        )
    }
}

impl Default for Journal {
    fn default() -> Self {
        Self::new()
    }
}

/// One thing the sandbox took from outside, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Entry {
    /// A reading of the wall clock: nanoseconds since the Unix epoch.
    #[serde(rename = "w")]
    Wall(u64),
    /// A reading of the monotonic clock, in nanoseconds.
    #[serde(rename = "m")]
    Monotonic(u64),
    /// The calls the guest passed to one `wait-for-tools` (valid or not).
    #[serde(rename = "c")]
    Calls(Vec<RecordedCall>),
    /// What that `wait-for-tools` returned (empty when it timed out).
    #[serde(rename = "r")]
    Results(Vec<RecordedResult>),
    /// A person's decision on a call held for approval, when it was made (between waits). A
    /// replay takes it wherever it stands: the held call is then decided at once, nobody asked.
    #[serde(rename = "d")]
    Decision(Decision),
    /// An HTTP request the program made (its network policy's, `net/`) and what came back; a
    /// replay answers it from here and makes no request.
    #[serde(rename = "h")]
    Http(RecordedHttp),
}

/// One HTTP request of the program's, as it saw it (secrets as placeholders, echoes scrubbed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedHttp {
    pub method: String,
    pub url: String,
    /// The response, or (`error`) why there was none.
    #[serde(default)]
    pub status: u16,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body, base64.
    #[serde(default)]
    pub body: String,
    /// `refused`, `failed` or `timed-out`, and the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<(String, String)>,
}

impl RecordedHttp {
    fn of(method: &str, url: &str, outcome: &Result<Response, Failure>) -> Self {
        use base64::Engine as _;
        let mut r = RecordedHttp {
            method: method.to_string(),
            url: url.to_string(),
            status: 0,
            reason: String::new(),
            headers: Vec::new(),
            body: String::new(),
            error: None,
        };
        match outcome {
            Ok(resp) => {
                r.status = resp.status;
                r.reason = resp.reason.clone();
                r.headers = resp.headers.clone();
                r.body = base64::engine::general_purpose::STANDARD.encode(&resp.body);
            }
            Err(Failure::Refused(m)) => r.error = Some(("refused".into(), m.clone())),
            Err(Failure::Failed(m)) => r.error = Some(("failed".into(), m.clone())),
            Err(Failure::TimedOut(m)) => r.error = Some(("timed-out".into(), m.clone())),
        }
        r
    }

    fn outcome(self) -> Result<Response, Failure> {
        use base64::Engine as _;
        match self.error {
            Some((kind, m)) => Err(match kind.as_str() {
                "refused" => Failure::Refused(m),
                "timed-out" => Failure::TimedOut(m),
                _ => Failure::Failed(m),
            }),
            None => Ok(Response {
                status: self.status,
                reason: self.reason,
                headers: self.headers,
                body: base64::engine::general_purpose::STANDARD.decode(&self.body).unwrap_or_default(),
            }),
        }
    }
}

/// How an HTTP request of a journaled execution goes.
pub(crate) enum HttpReplay {
    /// Past the recorded entries: made live, and recorded.
    Live,
    /// As the first run got it.
    Recorded(Result<Response, Failure>),
    Diverged(String),
}

impl Entry {
    /// About how many bytes it takes in a journal (for the cap).
    fn size(&self) -> usize {
        match self {
            Entry::Wall(_) | Entry::Monotonic(_) => 16,
            Entry::Calls(calls) => {
                calls.iter().map(|c| 32 + c.id.len() + c.namespace.len() + c.name.len() + c.input.len()).sum()
            }
            Entry::Results(results) => results.iter().map(|r| 32 + r.id.len() + r.value.len()).sum(),
            Entry::Decision(d) => {
                32 + d.id.len()
                    + match &d.verdict {
                        Verdict::Approve { input } => input.as_ref().map_or(0, String::len),
                        Verdict::Deny { reason: text } | Verdict::Unasked { message: text } => text.len(),
                    }
            }
            Entry::Http(h) => {
                32 + h.method.len()
                    + h.url.len()
                    + h.reason.len()
                    + h.body.len()
                    + h.headers.iter().map(|(k, v)| k.len() + v.len() + 8).sum::<usize>()
                    + h.error.as_ref().map_or(0, |(k, m)| k.len() + m.len())
            }
        }
    }
}

/// One tool call as the guest made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedCall {
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// The input as JSON text.
    pub input: String,
}

/// One result as the guest received it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedResult {
    pub id: String,
    /// The value as JSON text, or the error message.
    pub value: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error: bool,
}

impl From<RecordedResult> for ToolResult {
    fn from(r: RecordedResult) -> Self {
        ToolResult { id: r.id, outcome: if r.error { Err(r.value) } else { Ok(r.value) } }
    }
}

/// What [`crate::run::execution::Control::take_journal`] hands over: the entries recorded since the last take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalTake {
    pub entries: Vec<Entry>,
    /// The journal outgrew its cap (`Ceilings::max_journal_bytes`) and stopped recording: the
    /// execution cannot be replayed any more (the reason, for the client).
    pub lost: Option<String>,
}

/// How one `wait-for-tools` of a replay goes.
pub(crate) enum Replayed {
    /// Past the recorded entries: live, and recorded.
    Live,
    /// The calls match the record; the recorded results follow, or (`None`) the record ends
    /// here and the results will come live.
    Matched(Option<Vec<ToolResult>>),
    /// The program did not repeat itself: why, for the client.
    Diverged(String),
}

/// The recording (and replaying) side of one execution's journal, shared by its clocks, its
/// tool broker and its [`crate::run::execution::Control`].
pub(crate) struct Recorder {
    state: Mutex<State>,
    seed: [u8; 32],
    /// The secure and insecure random sources, shared by every WASI context made for the
    /// execution: a hibernated one's context is dropped and made again at its thaw
    /// (`wiring.rs`), and its sources must go on where they were, not start over.
    random: [SharedRng; 2],
}

/// A seeded random source that several WASI contexts can hold in turn.
#[derive(Clone)]
struct SharedRng(Arc<Mutex<StdRng>>);

impl rand::TryRng for SharedRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(rand::Rng::next_u32(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner())))
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(rand::Rng::next_u64(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner())))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        rand::Rng::fill_bytes(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()), dst);
        Ok(())
    }
}

struct State {
    /// Entries of an earlier run still to be given back (decisions taken out: `decided`).
    replay: VecDeque<Entry>,
    /// Decisions an earlier run recorded, by call id, until a held call takes its own.
    decided: std::collections::HashMap<String, Decision>,
    /// Entries recorded since the last take.
    new: Vec<Entry>,
    /// Bytes the journal may still take.
    room: usize,
    lost: Option<String>,
    /// Why the replay diverged at a clock reading (reported at the next wait or the end).
    diverged: Option<String>,
    /// Added to the live monotonic clock once the replay is over, so that it never goes back
    /// from the last recorded reading (each host's clock counts from its own start).
    monotonic_offset: u64,
    last_monotonic: u64,
    started: Instant,
    /// Clocks are read live and not recorded (`Recorder::set_quiet`).
    quiet: bool,
    /// The replay's span (`ptc.replay`, [`Recorder::traced`]) until the recorded entries are
    /// used up or the program diverges from them.
    span: Option<BoxedSpan>,
}

impl Recorder {
    pub(crate) fn new(journal: &Journal, max_bytes: usize) -> Arc<Self> {
        let recorded: usize = journal.entries.iter().map(Entry::size).sum();
        let (decisions, entries): (Vec<Entry>, Vec<Entry>) =
            journal.entries.iter().cloned().partition(|e| matches!(e, Entry::Decision(_)));
        let decided = decisions
            .into_iter()
            .filter_map(|e| match e {
                Entry::Decision(d) => Some((d.id.clone(), d)),
                _ => None,
            })
            .collect();
        // Each source gets its own stream, derived from the one seed.
        let derive = |label: u8| {
            let mut seed = journal.seed;
            seed[0] ^= label;
            SharedRng(Arc::new(Mutex::new(StdRng::from_seed(seed))))
        };
        Arc::new(Recorder {
            seed: journal.seed,
            random: [derive(1), derive(2)],
            state: Mutex::new(State {
                replay: entries.into(),
                decided,
                new: Vec::new(),
                room: max_bytes.saturating_sub(recorded),
                lost: None,
                diverged: None,
                monotonic_offset: 0,
                last_monotonic: 0,
                started: Instant::now(),
                quiet: false,
                span: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Seeded random sources and recording clocks for the sandbox.
    pub(crate) fn apply(self: &Arc<Self>, wasi: &mut WasiCtxBuilder) {
        let mut insecure_seed = [0u8; 16];
        insecure_seed.copy_from_slice(&self.seed[16..]);
        wasi.secure_random(self.random[0].clone())
            .insecure_random(self.random[1].clone())
            .insecure_random_seed(u128::from_le_bytes(insecure_seed) ^ 3)
            .wall_clock(Clock(self.clone()))
            .monotonic_clock(Clock(self.clone()));
    }

    /// A replay's span under the execution's (`parent`), from now until the program has
    /// repeated every recorded entry (or diverged): how long taking over a run cost. Nothing
    /// when there is nothing to replay.
    pub(crate) fn traced(&self, parent: &Parent) {
        let mut state = self.state();
        if state.replay.is_empty() {
            return;
        }
        let attributes = vec![
            KeyValue::new("ptc.replay.entries", state.replay.len() as i64),
            KeyValue::new("ptc.replay.decisions", state.decided.len() as i64),
        ];
        state.span = Some(parent.span("ptc.replay", SpanKind::Internal, attributes));
    }

    /// Ends the replay's span once the record is used up (or the program left it: `diverged`).
    fn replaying(state: &mut State, diverged: bool) {
        let diverged = diverged || state.diverged.is_some();
        if !(diverged || state.replay.is_empty()) {
            return;
        }
        let Some(mut span) = state.span.take() else { return };
        if diverged {
            span.set_status(Status::error("diverged"));
        }
        span.end();
    }

    /// Entries recorded since the last take.
    pub(crate) fn take(&self) -> JournalTake {
        let mut state = self.state();
        JournalTake { entries: std::mem::take(&mut state.new), lost: state.lost.clone() }
    }

    fn record(state: &mut State, entry: Entry) {
        if state.lost.is_some() {
            return;
        }
        let size = entry.size();
        if size > state.room {
            state.lost = Some(
                "its journal outgrew the server's limit (too many tool results or clock readings to replay)".into(),
            );
            state.new.clear();
            return;
        }
        state.room -= size;
        state.new.push(entry);
    }

    /// The guest passes `calls` to `wait-for-tools` in `round` (the round they would start).
    pub(crate) fn calls(&self, calls: &[RecordedCall], round: u32) -> Replayed {
        let mut state = self.state();
        let replayed = Self::calls_in(&mut state, calls, round);
        Self::replaying(&mut state, matches!(replayed, Replayed::Diverged(_)));
        replayed
    }

    fn calls_in(state: &mut State, calls: &[RecordedCall], round: u32) -> Replayed {
        if let Some(why) = state.diverged.take() {
            return Replayed::Diverged(format!("before round {round}: {why}"));
        }
        match state.replay.pop_front() {
            None => {
                Self::record(state, Entry::Calls(calls.to_vec()));
                Replayed::Live
            }
            Some(Entry::Calls(recorded)) if recorded == calls => match state.replay.front() {
                Some(Entry::Results(_)) => {
                    let Some(Entry::Results(results)) = state.replay.pop_front() else { unreachable!() };
                    Replayed::Matched(Some(results.into_iter().map(ToolResult::from).collect()))
                }
                None => Replayed::Matched(None),
                Some(_) => Replayed::Diverged(format!("round {round}: the journal has no results for its calls")),
            },
            Some(Entry::Calls(recorded)) => Replayed::Diverged(format!(
                "round {round}: it called {} where its first run called {}",
                describe(calls),
                describe(&recorded)
            )),
            Some(_) => Replayed::Diverged(format!(
                "round {round}: it called {} where its first run read the clock",
                describe(calls)
            )),
        }
    }

    /// Decisions the first run recorded for these held calls (a replay asks nobody twice).
    pub(crate) fn decisions_for(&self, held: &[ApprovalRequest]) -> Vec<Decision> {
        let mut state = self.state();
        held.iter().filter_map(|a| state.decided.remove(&a.call.id)).collect()
    }

    /// A person decided on a held call, now.
    pub(crate) fn decision(&self, decision: &Decision) {
        Self::record(&mut self.state(), Entry::Decision(decision.clone()));
    }

    /// An HTTP request `method url` of the program's: answered from the record while it
    /// lasts (and checked to be the recorded one), else made live.
    pub(crate) fn http(&self, method: &str, url: &str) -> HttpReplay {
        let mut state = self.state();
        let replay = Self::http_in(&mut state, method, url);
        Self::replaying(&mut state, matches!(replay, HttpReplay::Diverged(_)));
        replay
    }

    fn http_in(state: &mut State, method: &str, url: &str) -> HttpReplay {
        if let Some(why) = state.diverged.take() {
            return HttpReplay::Diverged(why);
        }
        match state.replay.front() {
            None => HttpReplay::Live,
            Some(Entry::Http(h)) if h.method == method && h.url == url => {
                let Some(Entry::Http(h)) = state.replay.pop_front() else { unreachable!() };
                HttpReplay::Recorded(h.outcome())
            }
            Some(Entry::Http(h)) => HttpReplay::Diverged(format!(
                "it made the HTTP request {method} {url} where its first run made {} {}",
                h.method, h.url
            )),
            Some(_) => HttpReplay::Diverged(format!(
                "it made the HTTP request {method} {url} where its first run did something else"
            )),
        }
    }

    /// What a live HTTP request got.
    pub(crate) fn record_http(&self, method: &str, url: &str, outcome: &Result<Response, Failure>) {
        Self::record(&mut self.state(), Entry::Http(RecordedHttp::of(method, url, outcome)));
    }

    /// What a live `wait-for-tools` returned.
    pub(crate) fn results(&self, results: Vec<RecordedResult>) {
        Self::record(&mut self.state(), Entry::Results(results));
    }

    /// Why the replay went wrong, if it did: a clock read out of turn, or entries the program
    /// never asked for.
    pub(crate) fn divergence(&self) -> Option<String> {
        let mut state = self.state();
        if let Some(why) = &state.diverged {
            return Some(why.clone());
        }
        let short = !state.replay.is_empty();
        Self::replaying(&mut state, short);
        short.then(|| "it ended before making all the tool calls of its first run".to_string())
    }

    /// Between a wait that answered `hibernate` and the program's next wait (its event loop
    /// unwinding out of the instance and re-entered after the thaw), the clocks are read live
    /// and not recorded: a run that did not hibernate made no such readings, so neither
    /// a replay of it nor of this one may expect them. Only a live run hibernates.
    pub(crate) fn set_quiet(&self, quiet: bool) {
        self.state().quiet = quiet;
    }

    /// What the monotonic clock reads now, not recorded.
    pub(crate) fn monotonic_now(&self) -> u64 {
        let state = self.state();
        (state.started.elapsed().as_nanos() as u64 + state.monotonic_offset).max(state.last_monotonic)
    }

    fn read(&self, wall: bool) -> u64 {
        let mut state = self.state();
        let live = if wall {
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
        } else {
            state.started.elapsed().as_nanos() as u64
        };
        let quiet = state.quiet && state.replay.is_empty();
        let value = match state.replay.front() {
            _ if quiet => None,
            Some(Entry::Wall(v)) if wall => Some(*v),
            Some(Entry::Monotonic(v)) if !wall => Some(*v),
            Some(_) if state.diverged.is_none() => {
                let kind = if wall { "wall" } else { "monotonic" };
                state.diverged = Some(format!("it read the {kind} clock where its first run did something else"));
                Self::replaying(&mut state, true);
                None
            }
            _ => None,
        };
        if let Some(v) = value {
            state.replay.pop_front();
            Self::replaying(&mut state, false);
            if !wall {
                state.last_monotonic = v;
                state.monotonic_offset = v.saturating_sub(live);
            }
            return v;
        }
        let value = if wall {
            live
        } else {
            let v = (live + state.monotonic_offset).max(state.last_monotonic);
            state.last_monotonic = v;
            v
        };
        if quiet {
            return value;
        }
        Self::record(&mut state, if wall { Entry::Wall(value) } else { Entry::Monotonic(value) });
        value
    }
}

/// `name(input)` of each call, inputs cut short.
fn describe(calls: &[RecordedCall]) -> String {
    if calls.is_empty() {
        return "no tool".into();
    }
    let one = |c: &RecordedCall| {
        let name = if c.namespace.is_empty() { c.name.clone() } else { format!("{}.{}", c.namespace, c.name) };
        let input: String = c.input.chars().take(200).collect();
        let more = if input.len() < c.input.len() { "…" } else { "" };
        format!("{name}({input}{more})")
    };
    calls.iter().map(one).collect::<Vec<_>>().join(", ")
}

/// The sandbox's wall and monotonic clocks, through the recorder.
struct Clock(Arc<Recorder>);

impl HostWallClock for Clock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.read(true))
    }
}

impl HostMonotonicClock for Clock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.read(false)
    }
}
