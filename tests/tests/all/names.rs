//! Tool names become Python identifiers; collisions are refused; reserved names are never shadowed.

use ptc_engine::{FailureKind, ToolDef};
use ptc_tests::*;

#[tokio::test]
async fn names_are_normalised() {
    let tools = ["get-weather", "my tool", "123data", "for", "search.web"].map(ToolDef::new).to_vec();
    let code = r#"
for f in [get_weather, my_tool, _123data, for_tool, searchweb]:
    print(f.__name__, await f())
"#;
    let run = drive(start(code, tools).await, |c| Ok(serde_json::json!(c.name))).await;
    assert_eq!(
        run.completed().stdout,
        "get_weather get-weather\nmy_tool my tool\n_123data 123data\nfor_tool for\nsearchweb search.web\n"
    );
}

#[tokio::test]
async fn colliding_names_are_rejected_before_anything_runs() {
    let tools = ["get-weather", "get weather"].map(ToolDef::new).to_vec();
    let run = drive(start("print('ran')", tools).await, echo).await;
    let f = run.failed();
    assert_eq!(f.kind, FailureKind::InvalidTools);
    assert!(
        f.message.contains("'get-weather' and 'get weather' both become the Python name 'get_weather'"),
        "{}",
        f.message
    );
    assert_eq!(f.stdout, "");
}

#[tokio::test]
async fn tools_cannot_shadow_builtins_asyncio_or_runtime_names() {
    let tools = ["print", "asyncio", "ToolError", "len"].map(ToolDef::new).to_vec();
    let code = r#"
print(asyncio.__name__, ToolError.__name__, len("abc"))
print(await print_tool(), await asyncio_tool(), await ToolError_tool(), await len_tool())
"#;
    let run = drive(start(code, tools).await, |c| Ok(serde_json::json!(c.name))).await;
    assert_eq!(run.completed().stdout, "asyncio ToolError 3\nprint asyncio ToolError len\n");
}

#[tokio::test]
async fn stubs_carry_docstrings_and_signatures() {
    let code = "import inspect\nprint(inspect.signature(get_weather))\nprint(get_weather.__doc__.splitlines()[0])";
    let run = drive(start(code, standard_tools()).await, standard_handler).await;
    assert_eq!(run.completed().stdout, "(city, days=..., **kwargs)\nWeather for a city.\n");
}
