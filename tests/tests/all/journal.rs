//! Journaled executions through the real component: a replay from the journal repeats the first
//! run exactly (random numbers, uuids, clock readings, tool calls), answers the recorded rounds
//! without the client, and goes live where the journal ends; a program that does not repeat
//! itself fails with kind `diverged`, naming the round.

use ptc_engine::{Entry, Event, Execution, ExecutionRequest, FailureKind, Journal, ToolCall, ToolDef, ToolResult};
use ptc_tests::*;
use serde_json::{Value, json};

const PROGRAM: &str = r#"
import random, uuid, time, os
r = random.random()
u = str(uuid.uuid4())
b = os.urandom(4).hex()
t1 = time.time()
m1 = time.monotonic()
a = await echo_tool(step=1, r=r, u=u, b=b, t1=t1)
m2 = time.monotonic()
c = await echo_tool(step=2, t2=time.time(), dm=m2 - m1)
print(r, u, b, t1, c["input"]["t2"], m2 - m1, m2 >= m1)
"#;

fn tools() -> Vec<ToolDef> {
    vec![ToolDef::new("echo_tool")]
}

/// Runs to the next `ToolCalls` event and returns its calls (`None`: the execution ended).
async fn next_calls(exec: &mut Execution) -> Option<Vec<ToolCall>> {
    while let Some(event) = exec.next_event().await {
        match event {
            Event::ToolCalls { calls, .. } => return Some(calls),
            Event::Output { .. } => {}
            Event::Completed(_) | Event::Failed(_) => return None,
        }
    }
    None
}

fn answer(exec: &Execution, calls: &[ToolCall]) {
    let results = calls.iter().map(|c| ToolResult::ok(&c.id, &json!({"input": c.input_value()}))).collect();
    exec.submit(results).unwrap();
}

async fn start_journaled(code: &str, journal: Journal) -> Execution {
    engine().start(ExecutionRequest::new(code).with_tools(tools()).with_journal(journal)).await.expect("start")
}

#[tokio::test]
async fn a_replay_repeats_the_first_run_and_goes_live_where_its_journal_ends() {
    // The first run, paused at its second round, as a node holds it before it is lost.
    let journal = Journal::new();
    let seed = journal.seed;
    let mut first = start_journaled(PROGRAM, journal).await;
    let round1 = next_calls(&mut first).await.expect("round 1");
    answer(&first, &round1);
    let round2 = next_calls(&mut first).await.expect("round 2");
    let entries = first.control().take_journal().expect("journaled").entries;
    assert!(first.control().take_journal().unwrap().entries.is_empty(), "a take hands each entry over once");
    assert!(entries.iter().any(|e| matches!(e, Entry::Wall(_))), "{entries:?}");
    assert!(matches!(entries.last(), Some(Entry::Calls(_))), "it ends with the pending calls: {entries:?}");
    let t1 = round1[0].input_value()["t1"].as_f64().unwrap();

    // The replay reaches the same round with the same calls, without asking the client for
    // round 1, and then runs live.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut again = start_journaled(PROGRAM, Journal::replay(seed, entries.clone())).await;
    let live = next_calls(&mut again).await.expect("the live round");
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].input, round2[0].input, "the same random draws and clock readings");
    answer(&again, &live);
    answer(&first, &round2);
    let replayed = drive(again, echo).await.completed();
    let original = drive(first, echo).await.completed();
    assert_eq!(replayed.stdout, original.stdout);
    assert_eq!(replayed.stats.round_trips, 2);
    assert!(replayed.stdout.contains(&format!("{t1}")), "{}", replayed.stdout);
    assert!(replayed.stdout.trim_end().ends_with("True"), "{}", replayed.stdout);

    // Another seed draws other numbers: the first call differs, and the replay says so.
    let mut other_seed = seed;
    other_seed[5] ^= 1;
    let failed =
        drive(start_journaled(PROGRAM, Journal::replay(other_seed, entries.clone())).await, echo).await.failed();
    assert_eq!(failed.kind, FailureKind::Diverged);
    assert!(failed.message.contains("round 1: it called echo_tool("), "{}", failed.message);
    assert!(failed.message.contains("where its first run called echo_tool("), "{}", failed.message);
    assert!(failed.message.contains("Run it again from the start"), "{}", failed.message);

    // Without a journal, two runs draw different numbers.
    let a = drive(start(PROGRAM, tools()).await, echo).await.completed().stdout;
    let b = drive(start(PROGRAM, tools()).await, echo).await.completed().stdout;
    assert_ne!(a.split(' ').next(), b.split(' ').next());
}

/// A JavaScript program's `Math.random`, `Date.now` and `performance.now` come back the same in
/// a replay, which goes live where the journal ends; TypeScript's too.
#[tokio::test]
async fn a_javascript_replay_repeats_its_random_numbers_and_clocks() {
    const JS: &str = r#"
const r = Math.random(), t1 = Date.now(), m1 = performance.now();
await new Promise((resolve) => setTimeout(resolve, 5));
const a = await echo_tool({step: 1, r, t1});
const c = await echo_tool({step: 2, r2: Math.random(), t2: Date.now(), dm: performance.now() - m1});
console.log(r, t1, c.input.r2, c.input.t2, c.input.dm >= 5);
"#;
    for runtime in [ptc_engine::Runtime::Javascript, ptc_engine::Runtime::Typescript] {
        let start_js = |journal: Journal| async move {
            let request = ExecutionRequest::new(JS).with_tools(tools()).with_journal(journal).with_runtime(runtime);
            engine().start(request).await.expect("start")
        };
        let journal = Journal::new();
        let seed = journal.seed;
        let mut first = start_js(journal).await;
        let round1 = next_calls(&mut first).await.expect("round 1");
        answer(&first, &round1);
        let round2 = next_calls(&mut first).await.expect("round 2");
        let entries = first.control().take_journal().expect("journaled").entries;
        assert!(entries.iter().any(|e| matches!(e, Entry::Wall(_))), "{entries:?}");

        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut again = start_js(Journal::replay(seed, entries.clone())).await;
        let live = next_calls(&mut again).await.expect("the live round");
        assert_eq!(live[0].input, round2[0].input, "the same random draws and clock readings ({runtime:?})");
        answer(&again, &live);
        answer(&first, &round2);
        let replayed = drive(again, echo).await.completed();
        let original = drive(first, echo).await.completed();
        assert_eq!(replayed.stdout, original.stdout);
        assert!(replayed.stdout.trim_end().ends_with("true"), "{}", replayed.stdout);
        // Without a journal, two runs draw different numbers.
        let plain = || ExecutionRequest::new(JS).with_tools(tools()).with_runtime(runtime);
        let a = drive(engine().start(plain()).await.unwrap(), echo).await.completed().stdout;
        let b = drive(engine().start(plain()).await.unwrap(), echo).await.completed().stdout;
        assert_ne!(a.split(' ').next(), b.split(' ').next());
    }
}

#[tokio::test]
async fn a_program_that_stops_short_of_its_journal_or_reads_the_clock_out_of_turn_diverges() {
    let journal = Journal::new();
    let seed = journal.seed;
    let code = "import time\nx = await echo_tool(v=1)\nprint(x)";
    let mut first = start_journaled(code, journal).await;
    let calls = next_calls(&mut first).await.unwrap();
    let mut entries = first.control().take_journal().unwrap().entries;
    answer(&first, &calls);
    let control = first.control();
    let done = drive(first, echo).await.completed();
    assert!(done.stdout.contains("'v': 1"), "{}", done.stdout);
    // The whole journal, up to the end: a replay of it completes the same way.
    entries.extend(control.take_journal().unwrap().entries);
    let again = drive(start_journaled(code, Journal::replay(seed, entries.clone())).await, echo).await.completed();
    assert_eq!(again.stdout, done.stdout);

    // A journal with a round the program never makes: it ended before repeating all of it.
    entries.push(Entry::Calls(vec![ptc_engine::RecordedCall {
        id: "call_2".into(),
        namespace: String::new(),
        name: "echo_tool".into(),
        input: "{\"v\":2}".into(),
    }]));
    let failed = drive(start_journaled(code, Journal::replay(seed, entries.clone())).await, echo).await.failed();
    assert_eq!(failed.kind, FailureKind::Diverged);
    assert!(failed.message.contains("ended before making all the tool calls of its first run"), "{}", failed.message);

    // A wall-clock reading recorded where the program now does something else.
    let mut clocked = vec![Entry::Wall(1)];
    clocked.extend(entries.into_iter().filter(|e| matches!(e, Entry::Calls(_))).take(1));
    let code_reads_late = "x = await echo_tool(v=1)\nimport time\nprint(time.time())";
    let failed = drive(start_journaled(code_reads_late, Journal::replay(seed, clocked)).await, echo).await.failed();
    assert_eq!(failed.kind, FailureKind::Diverged);
    // (Its event loop reads the monotonic clock first: that is where it parts from the journal.)
    assert!(
        failed.message.contains("before round 1: it read the monotonic clock where its first run"),
        "{}",
        failed.message
    );
}

#[tokio::test]
async fn only_fresh_python_executions_are_journaled() {
    let session = engine().open_session(ptc_engine::SessionRequest::default()).await.unwrap().0;
    let err = engine()
        .execute_in(&session, ExecutionRequest::new("pass").with_journal(Journal::new()))
        .await
        .err()
        .expect("refused");
    assert!(err.message().contains("live session cannot be journaled"), "{}", err.message());
    let plain = start("pass", vec![]).await;
    assert_eq!(plain.control().take_journal(), None);
    let _: Value = json!(null);
}

#[tokio::test]
async fn a_journaled_program_that_hibernated_replays_as_one_that_did_not() {
    // Hibernated at both rounds, and thawed once in between for a timer that reads the
    // clock: the waits it re-entered after each thaw, and the clock readings of its event
    // loop getting off the stack and back, are not in its journal.
    let hibernating = engine_with(|c| c.hibernate_after = Some(std::time::Duration::from_millis(30)));
    let code = format!(
        "import asyncio, time\n\
async def tick():\n    await asyncio.sleep(0.2)\n    print('tick', time.monotonic() > 0)\n\
ticking = asyncio.ensure_future(tick())\n{PROGRAM}"
    );
    let journal = Journal::new();
    let seed = journal.seed;
    let request = ExecutionRequest::new(code.clone()).with_tools(tools()).with_journal(journal);
    let mut first = hibernating.start(request).await.unwrap();
    let round1 = next_calls(&mut first).await.expect("round 1");
    eventually("it hibernates, thaws for its timer and hibernates again", || {
        hibernating.hibernated() == 1 && first.control().is_paused()
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    eventually("it hibernates after its timer", || hibernating.hibernated() == 1).await;
    answer(&first, &round1);
    let round2 = next_calls(&mut first).await.expect("round 2");
    eventually("it hibernates at round 2", || hibernating.hibernated() == 1).await;
    let entries = first.control().take_journal().expect("journaled").entries;

    let mut again = start_journaled(&code, Journal::replay(seed, entries.clone())).await;
    let Some(live) = next_calls(&mut again).await else {
        let failed = drive(start_journaled(&code, Journal::replay(seed, entries.clone())).await, echo).await;
        panic!("the replay ended: {failed:?}\n{entries:?}");
    };
    assert_eq!(live[0].input, round2[0].input, "the same random draws and clock readings");
    answer(&again, &live);
    answer(&first, &round2);
    let replayed = drive(again, echo).await.completed();
    let original = drive(first, echo).await.completed();
    assert!(original.stdout.starts_with("tick True\n"), "{}", original.stdout);
    assert_eq!(replayed.stdout, original.stdout);
}

/// Spans the engine ended, kept here (the SDK's simple processor exports each as it ends).
#[derive(Debug, Clone, Default)]
struct Kept(std::sync::Arc<std::sync::Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

impl opentelemetry_sdk::trace::SpanExporter for Kept {
    async fn export(&self, batch: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

impl Kept {
    fn named(&self, name: &str) -> Vec<opentelemetry_sdk::trace::SpanData> {
        self.0.lock().unwrap().iter().filter(|s| s.name == name).cloned().collect()
    }
}

/// A replay is a `ptc.replay` span of its execution while it repeats the journal: ended without
/// an error once the record is used up, with an error status when the program diverges.
#[tokio::test]
async fn a_replay_is_a_span_of_its_execution_and_a_divergence_its_error() {
    use opentelemetry::trace::{Status, TracerProvider as _};
    let kept = Kept::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().with_simple_exporter(kept.clone()).build();
    let engine = engine_with(|c| c.tracer = Some(ptc_engine::Tracer::new(provider.tracer("test"))));
    let code = "x = await echo_tool(v=1)\nprint(x)";
    let journal = Journal::new();
    let seed = journal.seed;
    let mut first = engine.start(ExecutionRequest::new(code).with_tools(tools()).with_journal(journal)).await.unwrap();
    let calls = next_calls(&mut first).await.unwrap();
    let control = first.control();
    answer(&first, &calls);
    drive(first, echo).await.completed();
    let entries = control.take_journal().unwrap().entries;
    assert!(kept.named("ptc.replay").is_empty(), "a first run replays nothing");

    let replay = |entries: Vec<Entry>| {
        let request = ExecutionRequest::new(code).with_tools(tools()).with_journal(Journal::replay(seed, entries));
        engine.start(request)
    };
    drive(replay(entries.clone()).await.unwrap(), echo).await.completed();
    let spans = kept.named("ptc.replay");
    assert_eq!(spans.len(), 1);
    let executions = kept.named("ptc.execution");
    assert_eq!(spans[0].parent_span_id, executions.last().unwrap().span_context.span_id());
    assert_eq!(spans[0].status, Status::Unset);
    let count =
        spans[0].attributes.iter().find(|a| a.key.as_str() == "ptc.replay.entries").map(|a| a.value.to_string());
    assert_eq!(count, Some(entries.len().to_string()));

    // A round the program never makes: it ends short of its journal, diverged.
    let mut longer = entries;
    longer.push(Entry::Calls(vec![ptc_engine::RecordedCall {
        id: "call_2".into(),
        namespace: String::new(),
        name: "echo_tool".into(),
        input: "{\"v\":2}".into(),
    }]));
    let failed = drive(replay(longer).await.unwrap(), echo).await.failed();
    assert_eq!(failed.kind, FailureKind::Diverged);
    let spans = kept.named("ptc.replay");
    assert_eq!(spans.len(), 2);
    assert_eq!(spans[1].status, Status::error("diverged"));
    let _ = provider.shutdown();
}
