//! The JavaScript runtime (`runtime: javascript`, QuickJS-ng): tools as promises, a gather in
//! one round, errors in words, limits, hibernation, through the engine and its real component.

use std::time::Duration;

use ptc_engine::{ExecutionRequest, FailureKind, Limits, Runtime};
use ptc_tests::*;
use serde_json::json;

fn js(code: &str) -> ExecutionRequest {
    ExecutionRequest::new(code).with_runtime(Runtime::Javascript).with_tools(standard_tools())
}

async fn run_js(code: &str) -> Run {
    drive(engine().start(js(code)).await.unwrap(), standard_handler).await
}

#[tokio::test]
async fn promise_all_of_three_tools_is_one_round_and_the_last_value_is_the_result() {
    let code = r#"
const sums = await Promise.all([1, 2, 3].map((i) => add({a: i, b: 10})));
const w = await get_weather({city: "Oslo"});
console.log(sums.join(","), w.city, w.temp);
console.error("to stderr");
({total: sums.reduce((x, y) => x + y, 0)})
"#;
    let run = run_js(code).await;
    assert_eq!(run.rounds.len(), 2, "the gather is one round, the weather another");
    assert_eq!(run.rounds[0].len(), 3);
    assert_eq!(run.rounds[0][0].name, "add");
    assert_eq!(run.rounds[0][0].input_value(), json!({"a": 1, "b": 10}));
    assert_eq!(run.rounds[1][0].name, "get-weather", "the tool's own name reaches the host");
    let done = run.completed();
    assert_eq!(done.stdout, "11,12,13 Oslo 21\n");
    assert_eq!(done.stderr, "to stderr\n");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&done.return_value).unwrap(), json!({"total": 36}));
    assert_eq!(done.stats.round_trips, 2);
}

#[tokio::test]
async fn a_failing_tool_rejects_with_a_tool_error_caught_or_not() {
    let code = r#"
try { await get_weather({city: "Nowhere"}) } catch (e) {
    console.log(e instanceof ToolError, e.name, e.message);
}
return await add({a: 1, b: 2});
"#;
    let done = run_js(code).await.completed();
    assert_eq!(done.stdout, "true ToolError no such city: Nowhere\n");
    assert_eq!(done.return_value, "3");

    let f = run_js("const w = await get_weather({city: 'Nowhere'});\nw").await.failed();
    assert_eq!(f.kind, FailureKind::PythonError);
    assert_eq!(f.message, "ToolError: no such city: Nowhere");
    assert!(f.traceback.contains("program.js:1:"), "where the program called it: {}", f.traceback);
    assert!(!f.traceback.contains("ptc:runtime"), "{}", f.traceback);
}

#[tokio::test]
async fn errors_name_the_program_line_and_column() {
    let f = run_js("let a = 1;\nlet b = ;\n").await.failed();
    assert!(f.message.starts_with("SyntaxError"), "{}", f.message);
    assert!(f.traceback.contains("program.js:2:"), "{}", f.traceback);

    let f = run_js("const x = 1;\nfunction f() { return x.y.z; }\nf();").await.failed();
    assert!(f.message.starts_with("TypeError"), "{}", f.message);
    assert!(f.traceback.contains("program.js:2"), "{}", f.traceback);
    assert!(!f.traceback.contains("ptc:runtime"), "{}", f.traceback);
}

/// Namespaced tools are objects; a namespace or tool named like one of the runtime's globals
/// (`fs`, `fetch`) is the tool; a session's next program gets its own tool list.
#[tokio::test]
async fn namespaces_hold_their_tools_and_tools_win_over_globals() {
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    let tools = vec![
        ptc_engine::ToolDef::new("search").with_namespace("web-search").with_parameters(schema.clone()),
        ptc_engine::ToolDef::new("open").with_namespace("web-search"),
        ptc_engine::ToolDef::new("read").with_namespace("fs"),
        ptc_engine::ToolDef::new("fetch"),
        ptc_engine::ToolDef::new("search_tools"),
    ];
    let code = r#"
const r = await Promise.all([web_search.search({q: "rust"}), web_search.open(), fs.read(), fetch({}), search_tools({})]);
r.map((x) => x.tool).join(",")
"#;
    let session =
        engine().open_session(ptc_engine::SessionRequest::new().with_runtime(Runtime::Javascript)).await.unwrap().0;
    let request = ExecutionRequest::new(code).with_runtime(Runtime::Javascript).with_tools(tools);
    let run = drive(engine().execute_in(&session, request).await.unwrap(), echo).await;
    assert_eq!(run.rounds.len(), 1);
    assert_eq!(run.completed().return_value, "\"search,open,read,fetch,search_tools\"");
    // The next program has only its own tools, and the runtime's fs, fetch and search_tools
    // again.
    let code = "[typeof web_search, typeof fs.readFile, typeof add, typeof Headers, search_tools('add').slice(0, 4)]";
    let request = ExecutionRequest::new(code).with_runtime(Runtime::Javascript).with_tools(standard_tools());
    let done = drive(engine().execute_in(&session, request).await.unwrap(), standard_handler).await.completed();
    assert_eq!(done.return_value, "[\"undefined\",\"function\",\"function\",\"function\",\"add(\"]");
    session.close();
}

#[tokio::test]
async fn timers_and_intervals_run_while_calls_are_out() {
    let code = r#"
let ticks = 0;
const started = Date.now();
const id = setInterval(() => { ticks += 1; }, 20);
const cleared = setTimeout(() => { throw new Error("cleared, never fired"); }, 10);
clearTimeout(cleared);
await new Promise((resolve) => setTimeout(resolve, 130));
clearInterval(id);
const at = ticks;
await new Promise((resolve) => setTimeout(resolve, 60));
[at >= 4 && at <= 7, ticks === at, Date.now() - started >= 190]
"#;
    let done = run_js(code).await.completed();
    assert_eq!(done.return_value, "[true,true,true]", "{}", done.stderr);
}

#[tokio::test]
async fn a_runaway_loop_stops_at_its_deadline_and_deep_recursion_ends_in_words() {
    let limits = Limits::default().with_timeout(Duration::from_millis(1000));
    let exec = engine().start(js("while (true) {}").with_limits(limits)).await.unwrap();
    assert_eq!(drive(exec, standard_handler).await.failed().kind, FailureKind::Timeout);

    let f = run_js("function f(n) { return f(n + 1) + 1; }\nf(0)").await.failed();
    assert!(f.message.starts_with("RangeError"), "{}", f.message);

    // Recursion inside QuickJS's C code overflows the native stack: the instance ends, in words.
    let f = run_js("JSON.parse('['.repeat(200000) + ']'.repeat(200000))").await.failed();
    assert!(f.message.starts_with("RangeError: Maximum call stack size exceeded"), "{}", f.message);
    assert_eq!(run_js("1 + 1").await.completed().return_value, "2", "the engine runs on");
}

#[tokio::test]
async fn a_timer_and_a_half_answered_gather_outlive_a_hibernation() {
    let engine = engine_with(|c| c.hibernate_after = Some(Duration::from_millis(30)));
    let code = r#"
const t0 = Date.now();
const later = new Promise((resolve) => setTimeout(() => { console.log("timer fired"); resolve("slept"); }, 300));
const one = async (i) => { const v = await add({a: i, b: i}); console.log("got", v); return v; };
const r = await Promise.all([one(1), one(2), one(3)]);
console.log("after", r.join(","));
[r, await later, Date.now() - t0 >= 300]
"#;
    let mut exec = engine.start(js(code)).await.unwrap();
    let calls = loop {
        match exec.next_event().await.expect("an event") {
            ptc_engine::Event::ToolCalls { calls, .. } => break calls,
            ptc_engine::Event::Output { .. } => {}
            other => panic!("expected tool calls, got {other:?}"),
        }
    };
    assert_eq!(calls.len(), 3, "the gather is one round");
    let answer = |c: &ptc_engine::ToolCall| ptc_engine::ToolResult::ok(&c.id, &standard_handler(c).unwrap());
    exec.submit(vec![answer(&calls[0])]).unwrap();
    eventually("the program hibernates", || engine.hibernated() == 1).await;
    // The timer is due while it sleeps: it thaws, runs it, and hibernates again.
    let mut printed = String::new();
    while !printed.contains("timer fired") {
        match exec.next_event().await.expect("an event") {
            ptc_engine::Event::Output { data, .. } => printed.push_str(&String::from_utf8_lossy(&data)),
            other => panic!("expected the program's output, got {other:?}"),
        }
    }
    eventually("the program hibernates again", || engine.hibernated() == 1).await;
    assert_eq!(engine.live_instances(), 0, "the instance is freed");
    exec.submit(calls[1..].iter().map(answer).collect()).unwrap();
    let done = drive(exec, standard_handler).await.completed();
    assert_eq!(done.stdout, "got 2\ntimer fired\ngot 4\ngot 6\nafter 2,4,6\n", "{}", done.stderr);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&done.return_value).unwrap(),
        json!([[2, 4, 6], "slept", true])
    );
}

/// A JavaScript session's snapshot is its memory: restored into a new session, everything is
/// there (a closure's state, a class, a `let`), and the globals its programs defined are named;
/// bytes of another kind, or a state past the bound, are refused in words.
#[tokio::test]
async fn a_session_snapshot_keeps_every_global_closures_included() {
    let engine = engine();
    let request = || ptc_engine::SessionRequest::new().with_runtime(Runtime::Javascript);
    let session = engine.open_session(request()).await.unwrap().0;
    let code = "var rows = [3, 1, 2];\nlet scale = 10;\nclass Acc { constructor() { this.n = 0 } add(x) { this.n += x; return this.n } }\n\
                const counter = (() => { let c = 0; return () => ++c })();\nfunction total() { return rows.reduce((a, b) => a + b) * scale }\n\
                counter(); counter();\nvar acc = new Acc(); acc.add(await add({a: 2, b: 3}));";
    drive(engine.execute_in(&session, js(code)).await.unwrap(), standard_handler).await.completed();
    let state = session.snapshot(1 << 20).await.unwrap();
    assert_eq!(state.kept, ["acc", "rows", "total"], "the var and function names");
    assert!(state.data.len() < 64 << 10, "{} bytes", state.data.len());
    session.close();

    let (restored, report) = engine.open_session(request().with_restore(state.data.clone())).await.unwrap();
    assert_eq!(report.kept, ["acc", "rows", "total"]);
    let done = drive(
        engine
            .execute_in(&restored, js("console.log(total(), counter(), acc.add(1), acc instanceof Acc, scale)"))
            .await
            .unwrap(),
        standard_handler,
    )
    .await
    .completed();
    assert_eq!(done.stdout, "60 3 6 true 10\n");
    restored.close();

    let other = engine.open_session(request().with_restore(b"PTCJ garbage".to_vec())).await.err().unwrap();
    assert!(other.message().contains("not a snapshot of a javascript session"), "{}", other.message());
    let session = engine.open_session(request()).await.unwrap().0;
    drive(
        engine.execute_in(&session, js("var big = 'x'.repeat(1 << 20) + Math.random()")).await.unwrap(),
        standard_handler,
    )
    .await
    .completed();
    let too_big = session.snapshot(4096).await.unwrap_err();
    assert!(too_big.message().contains("more than the 4096 a snapshot may hold"), "{}", too_big.message());
    let done = drive(engine.execute_in(&session, js("big.length")).await.unwrap(), standard_handler).await;
    assert!(done.completed().return_value.parse::<u64>().unwrap() > 1 << 20, "the session goes on");
    session.close();
}

/// An escape attempt is contained: a program that pollutes the prototypes and replaces
/// `JSON` and `Promise` still hands the host its calls' true arguments and gets their true
/// results; no module, loader or WASI function is reachable; and the next execution, and
/// another session, start clean.
#[tokio::test]
async fn an_escape_attempt_is_contained() {
    let code = r#"
Object.prototype.polluted = "yes";
Array.prototype.map = function () { return "hijacked" };
JSON.stringify = () => '"forged"';
JSON.parse = () => ({forged: true});
globalThis.Promise = function () { throw new Error("hijacked Promise") };
Function.prototype.call = () => "hijacked call";
const r = await add({a: 1, b: 2});
const reach = [typeof std, typeof os, typeof require, typeof module, typeof Deno, typeof WebAssembly,
               typeof process.binding, typeof __ptc_program, Object.keys(process)];
let imports = [];
for (const m of ["os", "qjs:os", "std", "/etc/passwd", "wasi:filesystem/types"]) {
  try { await import(m); imports.push("loaded " + m) } catch (e) { imports.push(e.name) }
}
let read;
try { await fs.readFile("/etc/passwd", "utf8"); read = "read" } catch (e) { read = e.code }
console.log(r, JSON.stringify(reach), imports.join(","), read);
({r, seen: [1, 2].length})
"#;
    let run = run_js(code).await;
    assert_eq!(run.rounds.len(), 1);
    assert_eq!(run.rounds[0][0].input_value(), json!({"a": 1, "b": 2}), "the host gets the true arguments");
    let done = run.completed();
    // Modules cannot be loaded (no loader: a ReferenceError), and outside /mnt/data nothing exists.
    let refused = "ReferenceError,ReferenceError,ReferenceError,ReferenceError,ReferenceError ENOENT";
    assert_eq!(done.stdout, format!("3 \"forged\" {refused}\n"), "{}", done.stdout);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&done.return_value).unwrap(), json!({"r": 3, "seen": 2}));
    // What the program saw, told through a tool instead of its forged JSON.
    let probe = "const reach = [typeof std, typeof os, typeof require, typeof module, typeof WebAssembly, typeof process.binding];\n\
                 await add({a: reach.filter((t) => t !== 'undefined').length, b: 0})";
    let run = run_js(probe).await;
    assert_eq!(run.rounds[0][0].input_value(), json!({"a": 0, "b": 0}), "no module, loader or WASI binding");

    // The next execution starts clean.
    let clean = "[typeof ({}).polluted, [1].map((x) => x + 1), JSON.stringify({a: 1}), typeof new Promise(() => {})]";
    let done = run_js(clean).await.completed();
    assert_eq!(done.return_value, r#"["undefined",[2],"{\"a\":1}","object"]"#);
    // And so does another session, while the polluted one goes on polluted.
    let open = || engine().open_session(ptc_engine::SessionRequest::new().with_runtime(Runtime::Javascript));
    let (polluted, other) = (open().await.unwrap().0, open().await.unwrap().0);
    let exec = |s, code: &str| engine().execute_in(s, js(code));
    drive(exec(&polluted, "Object.prototype.polluted = 1").await.unwrap(), standard_handler).await.completed();
    let other_sees = drive(exec(&other, "typeof ({}).polluted").await.unwrap(), standard_handler).await.completed();
    assert_eq!(other_sees.return_value, "\"undefined\"");
    let it_sees = drive(exec(&polluted, "({}).polluted").await.unwrap(), standard_handler).await.completed();
    assert_eq!(it_sees.return_value, "1");
    polluted.close();
    other.close();
}

/// The pre-run check: a tool call that cannot work refuses the program before any of it runs
/// (its first call, which could, is not made), in words with the tool's declaration and at the
/// call's line; TypeScript after its types are erased; in a session, which goes on.
#[tokio::test]
async fn tool_calls_that_cannot_work_refuse_the_program_before_it_runs() {
    let code = "await add({a: 1, b: 2});\nconsole.log('ran');\nawait get_weather({town: 'Oslo'})";
    let run = run_js(code).await;
    assert!(run.rounds.is_empty(), "nothing ran: {:?}", run.rounds);
    let f = run.failed();
    assert_eq!(f.kind, FailureKind::PythonError);
    assert!(
        f.message.starts_with("ToolCheckError: the program was not run: its tool call cannot work"),
        "{}",
        f.message
    );
    assert!(
        f.message.contains(
            "line 3: get_weather() is missing the required argument \"city\": \
             get_weather(args: { city: string; days?: number }): Promise<unknown>"
        ),
        "{}",
        f.message
    );
    assert!(f.traceback.contains("program.js:3:7"), "{}", f.traceback);
    assert!(!f.stdout.contains("ran"), "{}", f.stdout);

    let ts = js("const n: number = 2;\nawait add({a: n, b: 'two'});").with_runtime(Runtime::Typescript);
    let f = drive(engine().start(ts).await.unwrap(), standard_handler).await.failed();
    assert!(f.message.contains("line 2: add() takes a number as \"b\", not a string"), "{}", f.message);

    let session =
        engine().open_session(ptc_engine::SessionRequest::new().with_runtime(Runtime::Javascript)).await.unwrap().0;
    let exec = |code: &str| engine().execute_in(&session, js(code));
    let f = drive(exec("await add({a: 1, b: 2, c: 3}, 4)").await.unwrap(), standard_handler).await.failed();
    assert!(f.message.contains("add() takes one object of arguments, not 2"), "{}", f.message);
    // An earlier program's function is not refused as unknown.
    drive(exec("async function helper() { return 7 }").await.unwrap(), standard_handler).await.completed();
    let done = drive(exec("await helper()").await.unwrap(), standard_handler).await.completed();
    assert_eq!(done.return_value, "7");
    session.close();
}

/// `search_tools` and `describe_tools` find a program's tools by what they do and give their
/// declarations, as the engine renders them.
#[tokio::test]
async fn search_tools_and_describe_tools_find_the_programs_tools() {
    let code = "console.log(search_tools('weather in a city'));\nconsole.log(describe_tools('get_weather'));\n\
                console.log(describe_tools(['get_wether']))";
    let done = run_js(code).await.completed();
    // (What it returns is the shape its results had, once an earlier test has called it.)
    let mut parts = done.stdout.splitn(2, '\n');
    let found = parts.next().unwrap();
    assert!(found.starts_with("get_weather(args: { city: string; days?: number }): Promise<"), "{found}");
    assert!(found.ends_with("  // Weather for a city."), "{found}");
    let rest = parts.next().unwrap();
    assert!(
        rest.starts_with(
            "/** Weather for a city. */\ndeclare function get_weather(args: { city: string; days?: number }): Promise<"
        ),
        "{rest}"
    );
    assert!(rest.contains("// no tool \"get_wether\"; did you mean \"get_weather\"?"), "{rest}");
}

/// The check knows the runtime's globals: an awaited call of any of them is no unknown name.
#[tokio::test]
async fn the_check_knows_every_global_of_the_guest() {
    let names = run_js("Object.getOwnPropertyNames(globalThis).filter((n) => !['add', 'get_weather'].includes(n))")
        .await
        .completed()
        .return_value;
    let names: Vec<String> = serde_json::from_str(&names).unwrap();
    assert!(names.len() > 50 && names.contains(&"setTimeout".to_string()), "{names:?}");
    // Not those that turn the check off (a program with them may define anything).
    let calls: Vec<String> = names
        .iter()
        .filter(|n| !["eval", "Function", "globalThis"].contains(&n.as_str()))
        .map(|n| format!("await {n}();"))
        .collect();
    let code = format!("if (false) {{ {} }}\n'checked'", calls.join(" "));
    let done = run_js(&code).await;
    assert_eq!(done.completed().return_value, "\"checked\"");
}

#[tokio::test]
async fn a_session_keeps_its_globals_between_programs() {
    let engine = engine();
    let request = ptc_engine::SessionRequest::new().with_runtime(Runtime::Javascript);
    let session = engine.open_session(request).await.unwrap().0;
    let exec = |code: &str| engine.execute_in(&session, js(code));
    let first = "var rows = [3, 1, 2];\nlet total = await add({a: 40, b: 2});\nconst top = (n) => [...rows].sort().slice(-n);\nfunction twice(x) { return 2 * x; }";
    drive(exec(first).await.unwrap(), standard_handler).await.completed();
    let done = drive(exec("console.log(top(2), total, twice(total));\nrows.length").await.unwrap(), standard_handler)
        .await
        .completed();
    assert_eq!(done.stdout, "2,3 42 84\n");
    assert_eq!(done.return_value, "3");
    // As in Node's REPL, a `let` stays declared: declaring it again says what to do instead.
    let f = drive(exec("let total = 1;\ntotal").await.unwrap(), standard_handler).await.failed();
    assert!(f.message.starts_with("SyntaxError: redeclaration of 'total'"), "{}", f.message);
    assert!(f.message.contains("assign to it without let/const"), "{}", f.message);
    let done = drive(exec("total = 1;\nvar rows = 2;\ntotal + rows").await.unwrap(), standard_handler).await;
    assert_eq!(done.completed().return_value, "3");
    // A TypeScript program in the JavaScript session has its types erased.
    let ts = js("const more: number = 4;\nrows + more").with_runtime(Runtime::Typescript);
    let done = drive(engine.execute_in(&session, ts).await.unwrap(), standard_handler).await;
    assert_eq!(done.completed().return_value, "6");
    session.close();
    // A JavaScript program is refused by a Python session, in words.
    let python = engine.open_session(ptc_engine::SessionRequest::new()).await.unwrap().0;
    let refused = engine.execute_in(&python, js("1 + 1")).await.err().unwrap();
    assert!(refused.message().contains("this session runs python programs, not javascript"), "{refused}");
    python.close();
}

#[tokio::test]
async fn a_program_past_its_memory_limit_fails_as_memory() {
    let limits = Limits::default().with_max_memory_bytes(64 << 20);
    let code = "const a = [];\nwhile (true) a.push('x'.repeat(1 << 20) + a.length);";
    let exec = engine().start(js(code).with_limits(limits)).await.unwrap();
    let f = drive(exec, standard_handler).await.failed();
    assert_eq!(f.kind, FailureKind::Memory, "{}", f.message);
    assert_eq!(run_js("1 + 1").await.completed().return_value, "2", "the engine runs on");
}

#[tokio::test]
async fn files_under_mnt_data_are_written_read_and_listed_and_nothing_else_is_reachable() {
    let engine = engine_with(|c| c.hibernate_after = Some(Duration::from_millis(30)));
    let (root, dir) = data_dir_beside_a_secret("js-files");
    let code = r#"
await fs.writeFile("/mnt/data/notes.txt", "kept");
await fs.appendFile("notes.txt", " and more");
await fs.mkdir("/mnt/data/sub/deeper", {recursive: true});
await fs.writeFile("sub/bytes.bin", new Uint8Array([1, 2, 255]));
for (const path of ["/mnt/data/../secret.txt", "/etc/passwd", "/tmp/x"]) {
    try { await fs.writeFile(path, "x"); console.log("WROTE", path); }
    catch (e) { console.log("refused", e.code); }
}
try { await fs.readFile("/mnt/data/none.txt", "utf8"); } catch (e) { console.log(e.code, e.message); }
const w = await add({a: 1, b: 2});
const text = await fs.readFile("/mnt/data/notes.txt", "utf8");
const bytes = await fs.readFile("sub/bytes.bin");
const s = await fs.stat("sub");
[text, Array.from(bytes), await fs.readdir("/mnt/data"), s.isDirectory(), w]
"#;
    let mut exec = engine.start(js(code).with_data_dir(dir.clone())).await.unwrap();
    let calls = loop {
        match exec.next_event().await.expect("an event") {
            ptc_engine::Event::ToolCalls { calls, .. } => break calls,
            ptc_engine::Event::Output { .. } => {}
            other => panic!("expected tool calls, got {other:?}"),
        }
    };
    // It hibernates having used its files: it holds no file open.
    eventually("the program hibernates", || engine.hibernated() == 1).await;
    exec.submit(vec![ptc_engine::ToolResult::ok(&calls[0].id, &json!(3))]).unwrap();
    let done = drive(exec, standard_handler).await.completed();
    assert_eq!(
        done.stdout,
        "refused EACCES\nrefused ENOENT\nrefused ENOENT\nENOENT ENOENT: no such file or directory, open '/mnt/data/none.txt'\n",
        "{}",
        done.stderr
    );
    let value: serde_json::Value = serde_json::from_str(&done.return_value).unwrap();
    assert_eq!(value, json!(["kept and more", [1, 2, 255], ["notes.txt", "sub"], true, 3]));
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).unwrap(), "kept and more");
    assert_eq!(std::fs::read_to_string(root.join("secret.txt")).unwrap(), "do not read");
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test]
async fn typescript_runs_with_its_types_erased_and_its_errors_at_their_lines() {
    let ts = |code: &str| ExecutionRequest::new(code).with_runtime(Runtime::Typescript).with_tools(standard_tools());
    let code = r#"
interface Weather { city: string; temp: number }
const cities: string[] = ["Oslo", "Lima"];
const all = await Promise.all(cities.map((city) => get_weather({ city }) as Promise<Weather>));
function hottest<T extends Weather>(ws: T[]): T { return ws.reduce((a, b) => (b.temp > a.temp ? b : a)); }
const name: string = hottest<Weather>(all).city;
if (name.length > 100) throw new Error("too long");
return { name, count: all.length };
"#;
    let run = drive(engine().start(ts(code)).await.unwrap(), standard_handler).await;
    assert_eq!(run.rounds.len(), 1);
    let done = run.completed();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&done.return_value).unwrap(),
        json!({"name": "Oslo", "count": 2})
    );

    // A throw on line 3 is on line 3: the erased types kept every line and column.
    let f = drive(
        engine().start(ts("type N = number;\nconst n: N = 1;\nthrow new RangeError(`bad ${n}`);")).await.unwrap(),
        echo,
    )
    .await
    .failed();
    assert_eq!(f.message, "RangeError: bad 1");
    assert!(f.traceback.contains("program.js:3:"), "{}", f.traceback);

    // What cannot be erased, and what does not parse, are the program's SyntaxErrors where they are.
    let f = drive(engine().start(ts("const a = 1;\nenum Color { Red, Green }")).await.unwrap(), echo).await.failed();
    assert!(
        f.message.starts_with("SyntaxError: TypeScript: ") && f.message.contains("object of constants"),
        "{}",
        f.message
    );
    assert!(f.traceback.contains("program.js:2:"), "{}", f.traceback);
    let f = drive(engine().start(ts("let ok = 1;\nlet x: number = ;")).await.unwrap(), echo).await.failed();
    assert!(f.message.starts_with("SyntaxError: TypeScript: "), "{}", f.message);
    assert!(f.traceback.contains("program.js:2:"), "{}", f.traceback);
}

#[tokio::test]
async fn describe_gives_typescript_declarations_for_javascript_programs() {
    let mut tools = standard_tools();
    tools.push(
        ptc_engine::ToolDef::new("search-issues")
            .with_namespace("github")
            .with_description("Searches issues.\nReturns the first page.")
            .with_parameters(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "state": {"enum": ["open", "closed"]},
                    "labels": {"type": "array", "items": {"type": "string"}},
                    "where": {"$ref": "#/$defs/Place"}
                },
                "required": ["query"],
                "$defs": {"Place": {"type": "object", "properties": {"lat": {"type": "number"}}}}
            })),
    );
    // An engine of its own: the shared one has seen `add`'s results, whose shape it then shows.
    let engine = engine_with(|_| {});
    let d = engine.describe_tools_in(Runtime::Javascript, &tools, None).await.unwrap();
    let signatures: Vec<(&str, &str)> =
        d.tools.iter().map(|t| (t.python_name.as_str(), t.signature.as_str())).collect();
    assert_eq!(signatures[0], ("add", "add(args: { a: number; b: number }): Promise<unknown>"));
    assert_eq!(signatures[1].0, "get_weather");
    assert_eq!(
        signatures[2],
        (
            "github.search_issues",
            "github.search_issues(args: { query: string; state?: \"open\" | \"closed\"; labels?: string[]; \
             where?: { lat?: number } }): Promise<unknown>"
        )
    );
    assert!(
        d.stub.contains(
            "/** Adds two numbers. */\ndeclare function add(args: { a: number; b: number }): Promise<unknown>;"
        ),
        "{}",
        d.stub
    );
    assert!(d.stub.contains("declare namespace github {\n  /**\n   * Searches issues.\n   * Returns the first page.\n   */\n  function search_issues("), "{}", d.stub);
    assert!(d.stub.contains("declare class ToolError extends Error"), "{}", d.stub);
    // Python's, for the same tools, is unchanged.
    let python = engine.describe_tools(&tools, None).await.unwrap();
    assert!(python.tools[0].signature.starts_with("add(a: float, b: float)"), "{}", python.tools[0].signature);
}
