"""JavaScript and TypeScript programs (`runtime="javascript"`, `"typescript"`) through the
client, in process or against a server (the run's mode, conftest.py): Python functions as tools
a program awaits with one object argument, a gather in one round, a tool's failure as a
`ToolError`, sessions, files, limits."""

import pytest

import ptc_engine
from ptc_engine import Limits, Tool


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


async def get_weather(city: str) -> dict:
    """The weather in a city."""
    if city == "Nowhere":
        raise LookupError(f"no such city: {city}")
    return {"city": city, "temp": 21}


async def test_promise_all_of_three_calls_is_one_round_and_the_returned_value_comes_back(sb):
    code = (
        "const r = await Promise.all([1, 2, 3].map((i) => add({a: i, b: i})));\n"
        "console.log(r.join(' '));\n"
        "return {sum: r.reduce((x, y) => x + y, 0)};"
    )
    result = await sb.run(code, tools=[add], runtime="javascript")
    assert result.stdout == "2 4 6\n"
    assert result.return_value == {"sum": 12}
    assert result.stats.round_trips == 1 and [c.input for c in result.tool_calls][0] == {"a": 1, "b": 1}


async def test_a_raising_tool_rejects_with_a_tool_error_and_namespaces_are_objects(sb):
    weather = Tool.from_function(get_weather, namespace="weather")
    code = (
        "try { await weather.get_weather({city: 'Nowhere'}) } catch (e) { console.log(e.name, e.message) }\n"
        "(await weather.get_weather({city: 'Oslo'})).temp"
    )
    result = await sb.run(code, tools=[weather], runtime="javascript")
    assert result.stdout == "ToolError LookupError: no such city: Nowhere\n", result.stdout
    assert result.return_value == 21
    with pytest.raises(ptc_engine.PythonError) as e:
        await sb.run("const w = await weather.get_weather({city: 'Nowhere'});", tools=[weather], runtime="javascript")
    assert e.value.message.startswith("ToolError: LookupError: no such city: Nowhere\n"), e.value.message
    assert "program.js:1" in e.value.message and "ptc:runtime" not in e.value.message, e.value.message


async def test_a_javascript_session_keeps_its_variables_between_runs(sb):
    async with sb.session(runtime="javascript") as s:
        await s.run("var rows = [1, 2, 3];\nconst total = () => rows.reduce((a, b) => a + b, 0);")
        result = await s.run("rows.push(await add({a: 2, b: 2}));\nconsole.log(total())", tools=[add])
        assert result.stdout == "10\n"
        snapshot = await s.snapshot()
    # Its snapshot (its memory, sealed by the server) restores into a new session.
    async with sb.session(snapshot=snapshot) as restored:
        assert restored.restored == ["rows"], restored.restored
        result = await restored.run("console.log(total(), rows.length)")
        assert result.stdout == "10 4\n"


async def test_javascript_errors_and_limits_read_as_pythons_do(sb):
    with pytest.raises(ptc_engine.PythonError) as e:
        await sb.run("console.log('before');\nnull.x", runtime="javascript")
    assert e.value.message.startswith("TypeError") and "program.js:2" in str(e.value), str(e.value)
    assert e.value.result.stdout == "before\n"
    with pytest.raises(ptc_engine.ExecutionTimeout):
        await sb.run("while (true) {}", runtime="javascript", timeout=1)
    with pytest.raises(ptc_engine.MemoryLimitError):
        await sb.run("const a = []; while (true) a.push('x'.repeat(1 << 20) + a.length);", runtime="javascript",
                     limits=Limits(max_memory_bytes=64 << 20))


async def test_a_tool_call_that_cannot_work_refuses_the_javascript_program_before_it_runs(sb):
    weather = Tool.from_function(get_weather, namespace="weather")
    code = "await add({a: 1, b: 2});\nawait weather.get_wether({city: 'Oslo'})"
    with pytest.raises(ptc_engine.PythonError) as e:
        await sb.run(code, tools=[add, weather], runtime="javascript")
    message = e.value.message
    assert message.startswith("ToolCheckError: the program was not run"), message
    assert "line 2: weather has no tool \"get_wether\"; did you mean weather.get_weather(args: { city: string })" in message, message
    assert e.value.result.tool_calls == [], "nothing ran"


async def test_typescript_runs_with_its_types_erased(sb):
    code = (
        "interface Sum { total: number }\n"
        "const r: number[] = await Promise.all([1, 2].map((i: number) => add({a: i, b: i})));\n"
        "const s: Sum = { total: r[0] + r[1] };\n"
        "return s;"
    )
    result = await sb.run(code, tools=[add], runtime="typescript")
    assert result.return_value == {"total": 6} and result.stats.round_trips == 1
    with pytest.raises(ptc_engine.PythonError) as e:
        await sb.run("const a = 1;\nenum E { A }", runtime="typescript")
    assert e.value.message.startswith("SyntaxError: TypeScript: ") and "program.js:2" in str(e.value), str(e.value)


async def test_files_go_in_and_out_of_a_javascript_program(sb):
    code = (
        "const rows = (await fs.readFile('/mnt/data/in.csv', 'utf8')).trim().split('\\n');\n"
        "await fs.writeFile('/mnt/data/out.txt', `rows: ${rows.length}`);\n"
        "rows.length"
    )
    result = await sb.run(code, runtime="javascript", files={"in.csv": "a,b\n1,2\n"}, return_files=True)
    assert result.return_value == 2
    assert result.files == {"out.txt": b"rows: 2"}, result.files


async def test_describe_gives_typescript_declarations_for_javascript(sb):
    weather = Tool.from_function(get_weather, namespace="weather")
    d = await sb.describe([add, weather], runtime="javascript")
    assert [t.python_name for t in d.tools] == ["add", "weather.get_weather"]
    assert d.tools[0].signature == "add(args: { a: number; b: number }): Promise<number>", d.tools[0].signature
    assert "declare namespace weather {" in d.stub and "/** Adds two integers. */" in d.stub, d.stub
    python = await sb.describe([add])
    assert python.tools[0].signature.startswith("add(a: int, b: int)"), python.tools[0].signature
