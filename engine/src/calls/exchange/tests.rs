//! The exchange's own tests: all-or-nothing answers, decisions before results, results the
//! program sees as errors, held results charged to memory, waits.

use super::*;
use crate::api::events::Decision;

fn exchange() -> Exchange {
    let shares = crate::calls::shares::Shares::new(u64::MAX, None, None);
    Exchange::new(Arc::default(), 100, 1000, shares.memory_claim(None))
}

#[test]
fn submit_is_all_or_nothing() {
    let x = exchange();
    x.register(1, [("a", "t"), ("b", "t")]);
    x.register(2, [("c", "t")]);
    assert_eq!(x.pending_through(1, false), ["a", "b"]);
    assert_eq!(x.pending_through(2, false), ["a", "b", "c"]);
    x.submit(vec![ToolResult::ok_json("c", "3")]).unwrap();
    assert_eq!(x.drain(), Drained::Ready(vec![ToolResult::ok_json("c", "3")]));
    let err = x.submit(vec![ToolResult::ok_json("a", "1"), ToolResult::ok_json("zz", "2")]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidToolResult);
    assert!(err.message().contains("\"zz\" is not a pending"), "{err}");
    assert_eq!(x.drain(), Drained::Waiting, "nothing of a refused batch arrives");
    let err = x.submit(vec![ToolResult::ok_json("a", "1"), ToolResult::ok_json("a", "2")]).unwrap_err();
    assert!(err.message().contains("twice"), "{err}");
    x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap();
    let err = x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap_err();
    assert!(err.message().contains("already answered"), "{err}");
    assert_eq!(x.drain(), Drained::Ready(vec![ToolResult::ok_json("a", "1")]));
    assert_eq!(x.drain(), Drained::Waiting, "b is still pending");
    assert_eq!(x.pending_through(2, false), ["b"]);
    x.submit(vec![ToolResult::error("b", "no")]).unwrap();
    assert_eq!(x.drain(), Drained::Ready(vec![ToolResult::error("b", "no")]));
    assert_eq!(x.drain(), Drained::Idle);
}

fn held(id: &str) -> (String, ApprovalRequest) {
    let call = ToolCall { id: id.into(), name: "delete".into(), namespace: None, input: "{}".into(), trace: None };
    ("delete".into(), ApprovalRequest { call, reason: Some("stale".into()) })
}

#[test]
fn a_held_call_takes_a_decision_before_a_result() {
    let x = exchange();
    x.register(1, [("a", "get")]);
    x.hold(1, [held("b"), held("c"), held("d")]);
    assert_eq!(x.pending_through(1, false), ["a"]);
    assert_eq!(x.pending_through(1, true), ["b", "c", "d"]);
    let err = x.submit(vec![ToolResult::ok_json("b", "1")]).unwrap_err();
    assert!(err.message().contains("waits for the user's approval"), "{err}");
    // All or nothing: a decision for a call that is not held refuses the batch.
    let err = x.decide(&[Decision::approve("b"), Decision::approve("a")]).unwrap_err();
    assert!(err.message().contains("does not wait for a decision"), "{err}");
    let err = x.decide(&[Decision::approve("b"), Decision::deny("b", "no")]).unwrap_err();
    assert!(err.message().contains("twice"), "{err}");
    assert_eq!(x.drain(), Drained::Waiting);
    x.decide(&[
        Decision::approve_with("b", r#"{"id":2}"#),
        Decision::deny("c", "not that one"),
        Decision::unasked("d", "nobody"),
    ])
    .unwrap();
    let announced = x.take_announced();
    assert!(
        matches!(&announced[..], [Announce::Call(1, call)] if call.id == "b" && call.input == r#"{"id":2}"#),
        "{announced:?}"
    );
    assert_eq!(
        x.drain(),
        Drained::Ready(vec![
            ToolResult::error("c", "denied by the user: not that one"),
            ToolResult::error("d", "nobody")
        ])
    );
    assert!(x.decide(&[Decision::approve("b")]).unwrap_err().message().contains("approved already"));
    assert_eq!(x.pending_through(1, false), ["a", "b"]);
    x.submit(vec![ToolResult::ok_json("b", "1"), ToolResult::ok_json("a", "2")]).unwrap();
    assert!(x.decide(&[Decision::approve("c")]).unwrap_err().message().contains("already answered"));
}

#[test]
fn malformed_and_oversized_results_become_errors_the_program_sees() {
    let x = exchange();
    x.register(1, [("a", "t"), ("b", "t"), ("c", "t")]);
    let big = format!("\"{}\"", "x".repeat(200));
    x.submit(vec![ToolResult::ok_json("a", "{nope"), ToolResult::ok_json("b", big), ToolResult::ok_json("c", "[1]")])
        .unwrap();
    let Drained::Ready(got) = x.drain() else { panic!("answers arrived") };
    assert!(got[0].outcome.as_ref().unwrap_err().contains("malformed JSON"), "{got:?}");
    assert!(got[1].outcome.as_ref().unwrap_err().contains("202 bytes; the limit is 100"), "{got:?}");
    assert_eq!(got[2].outcome, Ok("[1]".into()));
}

#[test]
fn results_waiting_for_the_program_count_against_its_memory_and_the_budget() {
    let shares = crate::calls::shares::Shares::new(250, None, None);
    let x = Exchange::new(Arc::default(), 100, 200, shares.memory_claim(None));
    x.register(1, (0..5).map(|i| (["a", "b", "c", "d", "e"][i], "t")));
    let ninety = |id: &str| ToolResult::ok_json(id, format!("\"{}\"", "x".repeat(88)));
    x.submit(vec![ninety("a"), ninety("b"), ninety("c")]).unwrap();
    assert_eq!(shares.used(), 180, "two results wait, charged to the budget");
    let Drained::Ready(got) = x.drain() else { panic!("answers arrived") };
    assert!(got[..2].iter().all(|r| r.outcome.is_ok()), "{got:?}");
    let dropped = got[2].outcome.as_ref().unwrap_err();
    assert!(dropped.contains("(90 bytes) was dropped") && dropped.contains("180 bytes of results"), "{dropped}");
    assert_eq!(shares.used(), 0, "taken results are no longer held");
    // The budget (250) refuses what the limit (200) would allow once other work holds it.
    let mut other = shares.memory_claim(None);
    other.grow(200).unwrap();
    x.submit(vec![ninety("d")]).unwrap();
    let Drained::Ready(got) = x.drain() else { panic!("answers arrived") };
    assert!(got[0].outcome.as_ref().unwrap_err().contains("memory budget"), "{got:?}");
}

#[test]
fn a_finished_exchange_refuses_answers() {
    let x = exchange();
    x.register(1, [("a", "t")]);
    x.finish();
    assert_eq!(x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap_err().kind(), ErrorKind::Finished);
    assert!(x.is_finished());
}

#[tokio::test]
async fn wait_wakes_on_an_answer_given_before_or_during_it_and_counts_as_paused() {
    let x = Arc::new(exchange());
    x.register(1, [("a", "t"), ("b", "t")]);
    x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap();
    assert_eq!(
        x.wait(None, None).await,
        Waited::Ready(vec![ToolResult::ok_json("a", "1")]),
        "an answer given before the wait is taken at once"
    );
    let waiter = tokio::spawn({
        let x = x.clone();
        async move { x.wait(None, None).await }
    });
    while !x.is_paused() {
        tokio::task::yield_now().await;
    }
    assert_eq!(x.engine_paused.load(Ordering::Relaxed), 1);
    x.submit(vec![ToolResult::ok_json("b", "2")]).unwrap();
    assert_eq!(waiter.await.unwrap(), Waited::Ready(vec![ToolResult::ok_json("b", "2")]));
    assert!(!x.is_paused());
    assert_eq!(x.engine_paused.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn wait_with_a_timeout_returns_nothing_when_nothing_arrives() {
    let x = exchange();
    x.register(1, [("a", "t")]);
    assert_eq!(x.wait(Some(Duration::from_millis(5)), None).await, Waited::Ready(Vec::new()));
    assert!(!x.is_paused());
}

#[tokio::test]
async fn an_unwind_request_ends_the_wait_once_and_keeps_what_arrived() {
    let x = Arc::new(exchange());
    x.register(1, [("a", "t"), ("b", "t")]);
    let waiter = tokio::spawn({
        let x = x.clone();
        async move { x.wait(None, None).await }
    });
    while !x.is_paused() {
        tokio::task::yield_now().await;
    }
    x.request_unwind();
    assert_eq!(waiter.await.unwrap(), Waited::Unwind);
    x.submit(vec![ToolResult::ok_json("a", "1")]).unwrap();
    // Asked once, answered once: the next wait takes the answer.
    assert_eq!(x.wait(None, None).await, Waited::Ready(vec![ToolResult::ok_json("a", "1")]));
    // A request made while the program runs ends its next wait.
    x.request_unwind();
    assert_eq!(x.wait(None, None).await, Waited::Unwind);
}
