"""The client, in process or against a server (the run's mode, conftest.py): tools from plain
functions, rounds answered concurrently, results and failures as Python values and typed
errors, sessions, snapshots, files, streaming, cancellation, the sync twin, bad input named,
and API keys."""

import asyncio
import contextvars
import dataclasses
import os
import socket
import subprocess
import sys
import threading
from typing import Literal, Optional

from typing_extensions import TypedDict

import pydantic
import pytest

import ptc_engine
from ptc_engine import _transport
from ptc_engine import Limits, Output, Sandbox, Tool, ToolCalls, tool


async def get_weather(city: str, units: Literal["c", "f"] = "c") -> dict:
    """The weather in a city.

    Args:
        city: The city's name.
        units: Celsius or Fahrenheit.
    """
    return {"city": city, "temp": 21 if units == "c" else 70}


def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


async def test_a_program_calls_sync_and_async_tools_and_its_output_comes_back(sb):
    code = "w = await get_weather(city='Oslo')\nprint(w['temp'], await add(a=2, b=3))\nreturn w"
    result = await sb.run(code, tools=[get_weather, add])
    assert result.stdout == "21 5\n"
    assert result.return_value == {"city": "Oslo", "temp": 21}
    assert [c.name for c in result.tool_calls] == ["get_weather", "add"]
    assert result.tool_calls[1].input == {"a": 2, "b": 3} and result.tool_calls[1].result == 5
    assert result.stats.round_trips == 2 and result.stats.wall_time_s > 0
    assert result.execution_id


async def test_a_name_that_is_no_tool_is_answered_with_what_the_tools_are(sb):
    ran = []

    def log(text: str) -> None:
        """Logs a line."""
        ran.append(text)

    search = Tool.from_function(add, name="search_issues", namespace="github")
    listed = "the program's tools are add, get_weather, log; its tool namespaces are github (1 tool)"
    # Awaited, it is refused before anything runs (so the first call never happened).
    with pytest.raises(ptc_engine.PythonError) as refused:
        await sb.run("await log(text='first')\nawait web_search(query='x')", tools=[get_weather, add, log, search])
    assert refused.value.message.startswith("ToolCheckError: the program was not run"), refused.value.message
    assert f"line 2: web_search is not defined; no tool has that name: {listed}" in refused.value.message
    assert "search_tools(" in refused.value.message and ran == []
    # Reached some other way, it fails when reached, with the same list.
    with pytest.raises(ptc_engine.PythonError) as failed:
        await sb.run("r = await asyncio.gather(web_search(query='x'))", tools=[get_weather, add, log, search])
    assert failed.value.message.startswith(
        f"NameError: name 'web_search' is not defined; no tool has that name either: {listed}"
    ), failed.value.message


async def test_the_calls_of_one_round_are_answered_concurrently(sb):
    # Each waits for the other: answered one after another, they would never finish.
    ready = {"left": asyncio.Event(), "right": asyncio.Event()}

    async def left() -> str:
        ready["left"].set()
        await asyncio.wait_for(ready["right"].wait(), 10)
        return "L"

    async def right() -> str:
        ready["right"].set()
        await asyncio.wait_for(ready["left"].wait(), 10)
        return "R"

    result = await sb.run("print(await asyncio.gather(left(), right()))", tools=[left, right])
    assert result.stdout == "['L', 'R']\n"
    assert result.stats.round_trips == 1


TAG: contextvars.ContextVar[str] = contextvars.ContextVar("TAG")


async def test_sync_tools_run_in_tool_threads_at_once_in_the_caller_s_context(sb):
    # The three calls of one round each wait for the other two: run one after another, or on
    # the event loop, they would never meet.
    meeting = threading.Barrier(3, timeout=10)
    seen = []

    def meet(i: int) -> int:
        """Waits for the others."""
        seen.append((threading.current_thread().name, TAG.get(None)))
        meeting.wait()
        return i

    async def doubled(x: int) -> int:
        return 2 * x

    def later(x: int):  # noqa: ANN202 - a sync function whose result is awaited on the loop
        """Doubles `x`, later."""
        return doubled(x)

    def interrupted() -> None:
        """Raises what `Exception` does not catch."""
        raise KeyboardInterrupt("stop")

    TAG.set("the caller's")
    code = "print(await asyncio.gather(meet(i=1), meet(i=2), meet(i=3)), await later(x=4))"
    result = await sb.run(code, tools=[meet, later])
    assert result.stdout == "[1, 2, 3] 8\n" and result.stats.round_trips == 2
    assert [t for _, t in seen] == ["the caller's"] * 3
    assert all(name.startswith("ptc-engine-tool-") for name, _ in seen), seen
    # An exception a thread would swallow still answers the call: the run does not wait forever.
    result = await sb.run("try:\n    await interrupted()\nexcept ToolError as e:\n    print(e)", tools=[interrupted])
    assert result.stdout == "KeyboardInterrupt: stop\n"


async def test_a_sync_tool_s_answer_the_call_has_no_room_for_is_sent_by_the_loop():
    # A tool thread hands its answer over itself when the call has room; when it has none, the
    # loop sends it (waiting for room). A call that never has room shows the second way.
    pb = ptc_engine._proto.sandbox_pb2
    answered = asyncio.Event()
    sent: list = []

    class Crowded:
        def __init__(self) -> None:
            self.script = [
                pb.ServerMessage(started=pb.Started(execution_id="e1")),
                pb.ServerMessage(
                    tool_calls=pb.ToolCalls(round=1, calls=[pb.ToolCall(id="c1", name="add", input_json='{"a": 2, "b": 3}')])
                ),
            ]
            self.offered = 0

        def send(self, message):
            sent.append(message)
            if message.HasField("tool_results"):
                answered.set()

        async def write(self, message):
            self.send(message)

        def offer(self, message) -> bool:
            self.offered += 1
            return False

        async def read(self, idle: bool = False):
            if self.script:
                return self.script.pop(0)
            await asyncio.wait_for(answered.wait(), 10)
            return pb.ServerMessage(completed=pb.Completed(return_value_json="5"))

        def cancel(self) -> None:
            pass

    crowded = Crowded()

    class Transport:
        server = None

        async def open_execute(self, traceparent=None):
            return crowded

    start = ptc_engine._wire.start("return await add(a=2, b=3)", [Tool.from_function(add)], {})
    result = await ptc_engine._run.execute(Transport(), start, [Tool.from_function(add)], {})
    assert result.return_value == 5 and crowded.offered == 1
    answer = sent[-1].tool_results.results[0]
    assert (answer.call_id, answer.result_json) == ("c1", "5")


def test_a_process_exits_once_its_sync_tools_end_even_those_of_a_cancelled_run(url, key):
    # A sync tool still running when its run is cancelled goes on in its thread; the
    # interpreter's exit waits for it (as for `asyncio.to_thread`'s) and ends cleanly.
    script = (
        "import asyncio, time\n"
        "from ptc_engine import Sandbox\n"
        "def slow() -> int:\n"
        "    time.sleep(0.5)\n"
        "    print('slow ended', flush=True)\n"
        "    return 1\n"
        "async def main():\n"
        "    sb = Sandbox(%r, api_key=%r)\n"
        "    print((await sb.run('return 1 + await slow()', tools=[slow])).return_value, flush=True)\n"
        "    try:\n"
        "        await asyncio.wait_for(sb.run('await slow()', tools=[slow]), 0.2)\n"
        "    except asyncio.TimeoutError:\n"
        "        print('cancelled', flush=True)\n"
        "asyncio.run(main())\n"
    ) % (url, key)
    env = {k: v for k, v in os.environ.items() if k != "PTC_ENGINE_URL"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["slow ended", "2", "cancelled", "slow ended"], done.stdout


class Address(TypedDict):
    street: str
    zip: str


class Order(pydantic.BaseModel):
    sku: str
    quantity: int = 1


@dataclasses.dataclass
class Receipt:
    sku: str
    total: float


def place(order: Order, ship_to: Address, note: Optional[str] = None, priority: Literal["low", "high"] = "low") -> Receipt:
    """Places an order.

    Args:
        order: What to buy.
        ship_to: Where to send it.
        note: A note for the courier.
        priority: How fast.
    """
    assert isinstance(order, Order), "the handler gets the model, not a dict"
    return Receipt(sku=order.sku, total=9.5 * order.quantity)


async def test_a_call_that_needs_approval_waits_for_on_approval_while_the_others_run(sb):
    deleted = []

    @tool(requires_approval=True)
    async def delete_note(id: int) -> str:
        """Deletes a note."""
        deleted.append(id)
        return f"deleted {id}"

    asked = []
    add_done = asyncio.Event()

    async def approve(request: ptc_engine.ApprovalRequest) -> ptc_engine.Approve | ptc_engine.Deny | bool:
        # The other call of the round is answered while the user thinks.
        await asyncio.wait_for(add_done.wait(), 10)
        asked.append((request.call.input["id"], request.reason))
        if request.call.input["id"] == 1:
            return True
        if request.call.input["id"] == 2:
            return ptc_engine.Approve(input={"id": 20})
        return ptc_engine.Deny("keep it")

    def add_and_tell(a: int, b: int) -> int:
        add_done.set()
        return a + b

    code = """
async def rm(i):
    try:
        return await delete_note(id=i, _reason=f"note {i} is stale")
    except ToolError as e:
        return str(e)
print(await asyncio.gather(add(a=1, b=2), rm(1), rm(2), rm(3)))
"""
    add_tool = Tool.from_function(add_and_tell, name="add")
    result = await sb.run(code, tools=[add_tool, delete_note], on_approval=approve)
    assert result.stdout == "[3, 'deleted 1', 'deleted 20', 'denied by the user: keep it']\n"
    assert sorted(deleted) == [1, 20]
    assert sorted(asked) == [(1, "note 1 is stale"), (2, "note 2 is stale"), (3, "note 3 is stale")]
    ids = [c.id for c in result.tool_calls]
    assert len(set(ids)) == 4 and all(i.startswith("call_") for i in ids), ids
    # A tool that needs approval without anyone to ask: refused before anything runs.
    with pytest.raises(ptc_engine.InvalidRequest, match="on_approval"):
        await sb.run(code, tools=[add_tool, delete_note])


async def test_an_approval_with_arguments_the_schema_refuses_is_a_tool_error_and_the_run_goes_on(sb):
    deleted = []

    @tool(requires_approval=True)
    def delete_note(id: int) -> str:
        """Deletes a note."""
        deleted.append(id)
        return f"deleted {id}"

    def edit(request: ptc_engine.ApprovalRequest) -> ptc_engine.Approve:
        # A person's edit the tool's schema refuses: a string where it takes an integer.
        return ptc_engine.Approve(input={"id": "twenty"})

    code = """
try:
    await delete_note(id=2)
except ToolError as e:
    print("refused:", e)
print(await delete_note(id=3) if False else "went on")
"""
    result = await sb.run(code, tools=[delete_note], on_approval=edit)
    refused, went_on = result.stdout.splitlines()
    assert refused.startswith("refused: the user's answer could not be applied (the changed arguments of call"), refused
    assert "do not fit the tool" in refused and "twenty" in refused and refused.endswith("the call was not run"), refused
    assert went_on == "went on"
    assert deleted == []


async def test_schemas_come_from_type_hints_and_docstrings_and_values_convert(sb):
    t = Tool.from_function(place)
    assert t.description == "Places an order."
    props = t.parameters["properties"]
    assert set(t.parameters["required"]) == {"order", "ship_to"}
    assert props["priority"]["enum"] == ["low", "high"] and props["note"]["description"] == "A note for the courier."
    assert "title" not in props["order"]
    described = await sb.describe([place])
    assert described.tools[0].signature.startswith("place(order: {sku: str, quantity?: int}, ship_to: {street: str, zip: str}")
    # The return annotation is what the model reads the result will be.
    assert described.tools[0].signature.endswith(") -> {sku: str, total: float}"), described.tools[0].signature
    code = "r = await place(order={'sku': 'x1', 'quantity': 2}, ship_to={'street': 's', 'zip': '1'})\nprint(r)"
    result = await sb.run(code, tools=[place])
    assert result.stdout == "{'sku': 'x1', 'total': 19.0}\n"
    # The server checks inputs against the schema before a call leaves the sandbox.
    result = await sb.run(
        "try:\n    await place(order={'sku': 1}, ship_to={})\nexcept ToolError as e:\n    print(e)", tools=[place]
    )
    assert "invalid input for tool" in result.stdout, result.stdout


async def test_a_failing_tool_is_a_tool_error_and_bad_return_values_are_refused_in_words(sb):
    def boom() -> None:
        raise RuntimeError("the backend is down")

    def raw() -> bytes:
        return b"\x00\x01"

    @tool(name="socket_tool")
    def sock() -> object:
        return socket.socket()

    code = (
        "for f in (boom, raw, socket_tool):\n    try:\n        await f()\n    except ToolError as e:\n        print(e)"
    )
    result = await sb.run(code, tools=[boom, raw, sock])
    lines = result.stdout.splitlines()
    assert lines[0] == "RuntimeError: the backend is down"
    assert lines[1].startswith("tool 'raw' returned bytes, which have no JSON form"), lines[1]
    assert lines[2].startswith("tool 'socket_tool' returned a value that is not JSON"), lines[2]


async def test_failures_raise_one_error_type_per_kind_with_what_a_model_needs(sb):
    with pytest.raises(ptc_engine.PythonError) as e:
        await sb.run("print('before')\nx = 1 / 0")
    assert "ZeroDivisionError" in str(e.value) and "line 2" in str(e.value)
    assert e.value.result.stdout == "before\n" and e.value.kind == "python_error"
    with pytest.raises(ptc_engine.ExecutionTimeout) as e:
        await sb.run("while True:\n    pass", timeout=1)
    assert "timeout" in str(e.value).lower()
    with pytest.raises(ptc_engine.MemoryLimitError):
        await sb.run("x = bytearray(200 << 20)", limits=Limits(max_memory_bytes=64 << 20))
    with pytest.raises(ptc_engine.ProgramExit) as e:
        await sb.run("import sys\nsys.exit(3)")
    assert e.value.result.exit_code == 3
    with pytest.raises(ptc_engine.RoundTripLimit):
        await sb.run("for i in range(5):\n    await add(a=i, b=0)", tools=[add], limits=Limits(max_round_trips=2))
    with pytest.raises(ptc_engine.InvalidRequest, match="unknown runtime"):
        await sb.run("pass", runtime="python-7")


async def test_sessions_keep_state_snapshots_restore_it_and_files_come_and_go(sb):
    async with sb.session() as s:
        await s.run("rows = [1, 2, 3]\ndef total():\n    return sum(rows)")
        result = await s.run("print(total())")
        assert result.stdout == "6\n"
        await s.run("open('/mnt/data/notes.txt', 'w').write('kept')")
        snap = await s.snapshot(include_files=True)
        assert "rows" in snap.kept and snap.files == ["notes.txt"]
    restored = await sb.session(snapshot=snap)
    try:
        assert set(restored.restored) >= {"rows", "total"} and restored.files == ["notes.txt"]
        result = await restored.run("print(total(), open('/mnt/data/notes.txt').read())")
        assert result.stdout == "6 kept\n"
        # Files in, and the files a run writes back out.
        result = await restored.run(
            "print(open('/mnt/data/in.csv').read())\nopen('/mnt/data/out.txt', 'w').write('done')",
            files={"in.csv": "a,b\n1,2\n"},
            return_files=True,
        )
        assert result.stdout == "a,b\n1,2\n\n"
        assert result.files == {"out.txt": b"done"}, result.files
    finally:
        await restored.close()
    with pytest.raises(ptc_engine.SessionNotFound, match="has ended"):
        await restored.run("pass")
    # Outside a session too: a /mnt/data of the execution's own.
    result = await sb.run(
        "data = open('/mnt/data/x.bin', 'rb').read()\nopen('/mnt/data/y.bin', 'wb').write(data[::-1])",
        files={"x.bin": b"\x01\x02\x03"},
        return_files=True,
    )
    assert result.files == {"y.bin": b"\x03\x02\x01"}


async def test_output_streams_as_it_is_printed(sb):
    seen = []
    result = await sb.run(
        "import sys\nprint('one', flush=True)\nawait add(a=1, b=1)\nprint('two', file=sys.stderr)",
        tools=[add],
        on_output=seen.append,
    )
    assert "".join(o.text for o in seen if o.stream == "stdout") == "one\n"
    assert any(o.stream == "stderr" and "two" in o.text for o in seen)
    assert result.stderr == "two\n"
    events = [e async for e in sb.stream("print(await add(a=2, b=2))", tools=[add])]
    assert isinstance(events[0], ToolCalls) and events[0].calls[0].input == {"a": 2, "b": 2}
    assert any(isinstance(e, Output) and e.text == "4\n" for e in events)
    assert isinstance(events[-1], ptc_engine.Finished) and events[-1].result.stdout == "4\n"


async def test_cancelling_the_callers_task_cancels_the_execution_on_the_server(sb):
    async with sb.session() as s:
        task = asyncio.ensure_future(s.run("while True:\n    pass"))
        await asyncio.sleep(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # A cancelled execution stops its session's sandbox mid-program: the session says so.
        for _ in range(50):
            try:
                await s.run("pass")
            except ptc_engine.SessionBusy:
                await asyncio.sleep(0.1)
                continue
            except ptc_engine.SessionNotFound as e:
                assert "cancelled" in str(e)
                break
        else:
            pytest.fail("the cancelled execution kept running")


async def plus(a: int, b: int) -> int:
    """Adds two integers, at once (an async tool that never waits)."""
    return a + b


async def test_a_timeout_around_a_run_of_quick_rounds_cancels_it_mid_run(sb):
    code = "t = 0\nfor i in range(999):\n    t = await plus(a=t, b=1)\nreturn t"
    result = await sb.run(code, tools=[plus], limits=Limits(max_round_trips=1000))
    assert result.return_value == 999 and result.stats.round_trips >= 999
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(sb.run(code, tools=[plus], limits=Limits(max_round_trips=1000)), 0.05)
    assert (await sb.run("return 1")).return_value == 1


async def test_reads_let_the_event_loop_turn_even_when_every_message_is_there_at_once():
    # A call whose every message is there at once (what a run of quick rounds looks like when
    # each answer is sent without a turn of the loop): its reads must still let the loop turn,
    # or a timer (a timeout around the run) would never fire.
    class Instant:
        def next(self, spin_micros: int, block_micros: int) -> bytes:
            return b""  # an empty ServerMessage, at once

    call = _transport.NativeCall(Instant(), RuntimeError, _transport.Transport("http://unused", None))
    loop = asyncio.get_running_loop()
    fired: list[bool] = []
    loop.call_later(0.001, fired.append, True)
    began = loop.time()
    while not fired and loop.time() - began < 2:
        await call.read()
    assert fired, "2 s of reads and the loop never turned"
    assert loop.time() - began < 0.5


async def test_a_read_cancelled_while_it_waits_loses_no_message(sb):
    # Reads cut short by a timeout over and over, most of them while they wait on the loop: the
    # message a cancelled read had already taken is the next read's.
    call = await sb._transport.open_execute()
    code = "import time\nfor i in range(3):\n    time.sleep(0.05)\n    print(i, flush=True)\nreturn 'end'"
    call.send(ptc_engine._proto.sandbox_pb2.ClientMessage(start=ptc_engine._wire.start(code, [], {})))
    kinds, printed, cut = [], "", 0
    while "completed" not in kinds and "failed" not in kinds:
        try:
            message = await asyncio.wait_for(call.read(), 0.002)
        except asyncio.TimeoutError:
            cut += 1
            continue
        assert message is not None, kinds
        kinds.append(message.WhichOneof("message"))
        if kinds[-1] == "output":
            printed += message.output.data.decode()
    call.cancel()
    assert kinds[0] == "started" and kinds[-1] == "completed", kinds
    assert printed == "0\n1\n2\n" and cut > 10, (printed, cut)


def test_session_files_of_a_process_that_ended_without_cleaning_up_are_removed_by_the_next(tmp_path):
    # An in-process engine's session files go under a directory of its process's, removed at
    # its exit; a process ended by `os._exit` (or killed) cannot. The next process to start an
    # engine removes it: the lock its owner held on it is free.
    env = {k: v for k, v in os.environ.items() if k != "PTC_ENGINE_URL"}
    env["TMPDIR"] = str(tmp_path)
    run = "import os, sys\nfrom ptc_engine import Sandbox\nSandbox().run_sync('pass')\nprint(os.getpid(), flush=True)\n"
    first = subprocess.run([sys.executable, "-c", run + "os._exit(0)\n"], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    left = tmp_path / f"ptc-engine-files-{first.stdout.strip()}"
    assert left.is_dir(), list(tmp_path.iterdir())
    second = subprocess.run([sys.executable, "-c", run], env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert not left.exists()
    # And the second, which ended normally, removed its own.
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("ptc-engine-files-")] == []


async def test_one_connection_serves_many_executions_at_once(sb):
    results = await asyncio.gather(*[sb.run(f"print(await add(a={i}, b=1))", tools=[add]) for i in range(30)])
    assert [r.stdout for r in results] == [f"{i + 1}\n" for i in range(30)]


def test_the_sync_twin_works_in_scripts_and_inside_a_running_loop(url, key):
    with Sandbox(url, api_key=key) as sb:
        assert sb.run_sync("print(await add(a=40, b=2))", tools=[add]).stdout == "42\n"

        async def notebook_cell():
            # A notebook's cell already runs in an event loop.
            return sb.run_sync("print(await get_weather(city='Rome'))", tools=[get_weather]).stdout

        assert asyncio.run(notebook_cell()) == "{'city': 'Rome', 'temp': 21}\n"
        assert sb.describe_sync([add]).tools[0].signature == "add(a: int, b: int) -> int"


async def test_bad_input_is_named(url, key, sb):
    with pytest.raises(ptc_engine.InvalidToolError, match=r"\*args"):
        Tool.from_function(lambda *args: None, name="spread")
    with pytest.raises(ptc_engine.InvalidToolError, match="no JSON Schema"):

        def takes_socket(s: socket.socket) -> None: ...

        Tool.from_function(takes_socket)
    # A schema whose checks multiply: the server refuses it, naming the tool.
    defs = {}
    for i in range(21):
        nxt = {"type": "string"} if i == 20 else {"$ref": f"#/$defs/d{i + 1}"}
        defs[f"d{i}"] = {"anyOf": [nxt, dict(nxt)]}
    chain = Tool("chain", handler=lambda **kw: None, parameters={"$defs": defs, "properties": {"x": {"$ref": "#/$defs/d0"}}})
    with pytest.raises(ptc_engine.InvalidRequest, match="'chain'|\"chain\".*too costly"):
        await sb.run("pass", tools=[chain])
    # Nobody listening there (a URL given is a server, whichever mode this run is in).
    async with Sandbox("http://127.0.0.1:9", api_key=key) as nowhere:
        with pytest.raises(ptc_engine.ServerUnavailable, match="cannot reach the ptc-engine server at http://127.0.0.1:9") as e:
            await nowhere.run("pass")
    assert "Connection refused" in str(e.value), e.value  # the cause, not only "tcp connect error"
    with pytest.raises(ptc_engine.InvalidRequest, match="is not a server URL"):
        await Sandbox("http://not a host:1").run("pass")


@pytest.mark.remote
async def test_a_server_behind_tls_is_reached_with_https_and_its_certificate_checked(url, key, tmp_path, monkeypatch):
    # A TLS terminator in front of the server (as a platform's ingress is), its certificate
    # from a CA of the test's own (trustme), which the client trusts only through SSL_CERT_FILE.
    import ssl

    import trustme

    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    context.set_alpn_protocols(["h2"])
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def pipe(reader, writer):
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def terminate(reader, writer):
        upstream = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, upstream[1]), pipe(upstream[0], writer), return_exceptions=True)

    async with await asyncio.start_server(terminate, "127.0.0.1", 0, ssl=context) as terminator:
        tls = f"https://localhost:{terminator.sockets[0].getsockname()[1]}"
        ca_file = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        async with Sandbox(tls, api_key=key) as sb:
            assert (await sb.run("return await add(a=6, b=7)", tools=[add])).return_value == 13
        # Trusting another CA, the client refuses the certificate, and the message says why.
        trustme.CA().cert_pem.write_to_path(str(ca_file))
        async with Sandbox(tls, api_key=key) as untrusting:
            with pytest.raises(ptc_engine.ServerUnavailable, match=f"cannot reach the ptc-engine server at {tls}") as e:
                await untrusting.run("pass")
        assert "certificate" in str(e.value), e.value


@pytest.mark.remote
async def test_a_refused_or_missing_key_says_where_a_key_goes(url, key, monkeypatch):
    # In process there is no server to check a key (the next test): only a server refuses one.
    if not key:
        pytest.skip("the server takes no key")
    # Every integration makes its Sandbox from PTC_ENGINE_API_KEY: the message names it.
    async with Sandbox(url, api_key="not-a-key") as wrong:
        with pytest.raises(ptc_engine.AuthenticationError, match="refused the API key") as refused:
            await wrong.run("pass")
    assert "PTC_ENGINE_API_KEY" in str(refused.value) and "api_key=" in str(refused.value), refused.value
    monkeypatch.delenv("PTC_ENGINE_API_KEY", raising=False)
    async with Sandbox(url) as keyless:
        with pytest.raises(ptc_engine.AuthenticationError, match="none was sent") as missing:
            await keyless.run("pass")
    assert "PTC_ENGINE_API_KEY" in str(missing.value), missing.value


async def test_in_process_no_key_is_needed_and_one_given_is_not_checked(monkeypatch):
    # As a server in local mode: the same code, and the same environment, serve both, so a key
    # meant for a server (given, or in PTC_ENGINE_API_KEY) is no error when none is named. The
    # engine is in this process in either mode of the run (the wheel has it).
    monkeypatch.delenv("PTC_ENGINE_URL", raising=False)
    monkeypatch.setenv("PTC_ENGINE_API_KEY", "not-a-key")
    for given in ("not-a-key", None):
        async with Sandbox(api_key=given) as local:
            assert local.url == "in-process"
            assert (await local.run("return 1")).return_value == 1
    # An empty PTC_ENGINE_URL names no server either.
    monkeypatch.setenv("PTC_ENGINE_URL", "")
    assert Sandbox().url == "in-process"


def test_a_sandbox_used_under_many_asyncio_runs_keeps_no_dead_channels(url, key):
    # As frameworks that run each call under asyncio.run use it: one connection for every
    # loop, made on the lane of the native client, not on a loop that ends (in process: no
    # connection at all, one engine for every loop).
    sb = Sandbox(url, api_key=key)
    for i in range(3):
        assert asyncio.run(sb.run(f"return {i}")).return_value == i
    assert sb._transport.channels() == (0 if url is None else 1)


async def test_text_the_wire_cannot_carry_is_escaped_not_a_crash(sb):
    # A lone surrogate in a result, a message or a tool's input used to trap the sandbox.
    async def echo(s: str) -> str:
        return s

    code = "try:\n    await echo(s='\\ud800')\nexcept TypeError as e:\n    print(e)\nreturn ['\\udc00', 10**5000]"
    result = await sb.run(code, tools=[echo])
    assert "hold text that is not valid Unicode" in result.stdout and not result.tool_calls
    assert result.return_value == ["\udc00", "<int of 16610 bits>"]
    with pytest.raises(ptc_engine.PythonError, match=r"ValueError: \\ud800"):
        await sb.run("raise ValueError('\\ud800')")
    with pytest.raises(ptc_engine.PythonError, match=r"called without `await`, so it never ran: write `await echo\(...\)`"):
        await sb.run("return echo(s='x')", tools=[echo])
