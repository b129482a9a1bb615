//! A small per-memory address reservation (for density) caps what an execution may allocate,
//! and the engine still runs programs under the pooling allocator.

use ptc_engine::{Engine, ErrorKind, ExecutionRequest, FailureKind, Limits, MIB};
use ptc_tests::*;

fn engine_with_reservation(mib: u64) -> Result<Engine, ptc_engine::Error> {
    let mut config = engine_config();
    config.max_concurrent = 16;
    config.memory_reservation = Some(mib * MIB);
    Engine::new(config)
}

#[test]
fn reservation_below_what_cpython_needs_is_refused() {
    let err = engine_with_reservation(8).err().expect("an 8 MiB reservation is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert!(err.message().contains("32 MiB"), "{}", err.message());
}

#[tokio::test]
async fn reservation_caps_memory_and_programs_still_run() {
    let engine = engine_with_reservation(96).expect("engine");
    assert!(engine.is_pooling(), "the pool sized from the component fits this machine");
    assert_eq!(engine.config().ceilings.max_memory_bytes, 96 * MIB);
    assert_eq!(engine.config().default_limits.max_memory_bytes, 96 * MIB);

    // Asking for more than the reservation is a request error, not a late trap.
    let too_big = ExecutionRequest::new("pass").with_limits(Limits::default().with_max_memory_bytes(128 * MIB));
    let err = engine.start(too_big).await.err().expect("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);

    let request = ExecutionRequest::new("print(int(await add(a=2, b=3)))").with_tools(standard_tools());
    let run = drive(engine.start(request).await.unwrap(), standard_handler).await;
    assert_eq!(run.completed().stdout, "5\n");

    let bomb = "x = []\nwhile True:\n    x.append(bytearray(1 << 20))";
    let f = drive(engine.start(ExecutionRequest::new(bomb)).await.unwrap(), echo).await.failed();
    assert_eq!(f.kind, FailureKind::Memory);
}
