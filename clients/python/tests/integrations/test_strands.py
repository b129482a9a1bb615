"""Strands with ptc-engine: the programmatic tool caller and `PtcSandbox`, driven by a scripted
`strands.models.Model` (Strands ships no test model; this one streams the events a provider
would: a tool use, then text) through a real `strands.Agent`."""

import asyncio
import json
import threading

import pytest
from strands import Agent, tool
from strands.models.model import Model

from ptc_engine.integrations.strands import PtcSandbox, make_ptc_tool_caller


class Scripted(Model):
    """Answers each turn with the next tool use of `turns`, then with "done"; keeps the tool
    results it was shown and the tool specs it was offered."""

    def __init__(self, *turns):
        self.turns = list(turns)
        self.shown = []
        self.specs = None

    def update_config(self, **config):
        pass

    def get_config(self):
        return {}

    async def structured_output(self, output_model, prompt, system_prompt=None, **kwargs):
        raise NotImplementedError
        yield

    async def stream(self, messages, tool_specs=None, system_prompt=None, **kwargs):
        self.specs = tool_specs
        for block in messages[-1]["content"]:
            if "toolResult" in block:
                self.shown.append(block["toolResult"])
        yield {"messageStart": {"role": "assistant"}}
        if self.turns:
            name, args = self.turns.pop(0)
            yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": f"t{len(self.shown)}", "name": name}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockDelta": {"delta": {"text": "done"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}


def text_of(result):
    return result["status"], "".join(block.get("text", "") for block in result["content"])


both = {}


def meet(me):
    # Each tool waits for the other, so the program finishes only if they run at once.
    both[me].set()
    for event in both.values():
        assert event.wait(10), "the two calls of one gather did not run at the same time"


@tool
def price(sku: str) -> dict:
    """The price of an item.

    Args:
        sku: The item's code.
    """
    meet("price")
    return {"sku": sku, "price": 9.5}


@tool
def stock(sku: str) -> str:
    """How many of an item are left.

    Args:
        sku: The item's code.
    """
    meet("stock")
    return "3"


@tool
def broken(sku: str) -> str:
    """Always fails."""
    raise ValueError(f"no such sku {sku}")


@pytest.fixture(autouse=True)
def fresh_events():
    both.clear()
    both.update(price=threading.Event(), stock=threading.Event())


def test_a_program_gathers_two_agent_tools_and_only_its_print_comes_back(url, key, sandboxes):
    code = (
        "import asyncio\n"
        "p, s = await asyncio.gather(price(sku='A1'), stock(sku='A1'))\n"
        "print(f\"{s} left at {p['price']}\")"
    )
    model = Scripted(("programmatic_tool_caller", {"code": code}))
    agent = Agent(model=model, tools=[price, stock, make_ptc_tool_caller(sandbox=url, api_key=key)])
    agent("go")
    assert [text_of(r) for r in model.shown] == [("success", "3 left at 9.5")]
    # Given `sandbox=url`, the integration made its own Sandbox: in this process when `url` is None.
    assert {s.url for s in sandboxes} == {url or "in-process"}, sandboxes
    # The caller itself is not offered to programs, and the agent sees the tools' schemas.
    names = sorted(s["name"] for s in model.specs)
    assert names == ["price", "programmatic_tool_caller", "stock"]


def test_tool_errors_and_program_errors_reach_the_model(url, key):
    model = Scripted(
        ("programmatic_tool_caller", {"code": "try:\n    await broken(sku='Z')\nexcept RuntimeError as e:\n    print(e)"}),
        ("programmatic_tool_caller", {"code": "print('before')\nclass A: pass\nA().missing"}),
        ("programmatic_tool_caller", {"code": "await price()"}),
    )
    agent = Agent(model=model, tools=[price, broken, make_ptc_tool_caller(sandbox=url, api_key=key)])
    agent("go")
    (s1, caught), (s2, failed), (s3, invalid) = [text_of(r) for r in model.shown]
    assert s1 == "success" and caught == "Tool 'broken' error: Error: no such sku Z", caught
    assert s2 == "error" and failed.startswith("Execution error:\n[stdout before error]\nbefore")
    assert "AttributeError" in failed and 'File "<code>", line 3' in failed, failed
    assert s3 == "error" and "sku" in invalid, invalid


def test_what_the_model_sees_and_what_you_see(url, key):
    # docs/strands.md: every failure, a server that cannot be reached too, is the tool's error
    # result, which the model reads; nothing is raised to the agent's caller.
    nowhere = "http://127.0.0.1:9"
    model = Scripted(("programmatic_tool_caller", {"code": "print(1)"}), ("python_repl", {"code": "print(1)"}))
    agent = Agent(model=model, tools=[price, make_ptc_tool_caller(sandbox=nowhere, api_key=key)], sandbox=PtcSandbox(nowhere))
    agent("go")
    (s1, caller), (s2, repl) = [text_of(r) for r in model.shown]
    assert s1 == "error" and caller.startswith(f"Execution error: cannot reach the ptc-engine server at {nowhere}"), caller
    assert s2 == "error" and f"cannot reach the ptc-engine server at {nowhere}" in repl, repl


def test_allowed_tools_limit_what_a_program_can_call(url, key):
    model = Scripted(("programmatic_tool_caller", {"code": "print(sorted(n for n in ('price', 'stock') if n in globals()))"}))
    caller = make_ptc_tool_caller(sandbox=url, api_key=key, allowed_tools=["stock"])
    Agent(model=model, tools=[price, stock, caller])("go")
    assert text_of(model.shown[0]) == ("success", "['stock']")


def test_the_sandbox_runs_the_agents_python_and_keeps_state_and_files(url, key):
    sandbox = PtcSandbox(url, api_key=key)
    model = Scripted(
        ("python_repl", {"code": "import statistics\nxs = [1, 2, 3, 4]\nopen('xs.txt', 'w').write(str(xs))\nprint(statistics.mean(xs))"}),
        ("python_repl", {"code": "print(len(xs), open('/mnt/data/xs.txt').read())"}),
        ("python_repl", {"code": "import sys\nprint('bad', file=sys.stderr)\nsys.exit(3)"}),
        ("python_repl", {"code": "print('before')\nraise ValueError('boom')"}),
    )
    agent = Agent(model=model, sandbox=sandbox)
    agent("go")
    outputs = [json.loads(text_of(r)[1]) if text_of(r)[1].startswith("{") else text_of(r) for r in model.shown]
    assert outputs[0] == {"output": "2.5\n", "error": "", "exit_code": 0}, outputs
    assert outputs[1] == {"output": "4 [1, 2, 3, 4]\n", "error": "", "exit_code": 0}, outputs
    assert outputs[2]["exit_code"] == 3 and outputs[2]["error"].startswith("bad"), outputs
    # The traceback once, with the model's line numbers.
    raised = outputs[3]
    assert raised["exit_code"] == 1 and raised["output"] == "before\n", outputs
    assert raised["error"].startswith("Traceback (most recent call last):\n") and raised["error"].count("ValueError: boom") == 1, raised
    assert ", line 2, in <module>" in raised["error"], raised

    async def files():
        await sandbox.write_file("notes/a.txt", b"\x00bytes")
        assert await sandbox.read_file("/mnt/data/notes/a.txt") == b"\x00bytes"
        listed = {f.name: (f.is_dir, f.size) for f in await sandbox.list_files(".")}
        assert listed["notes"] == (True, None) and listed["xs.txt"] == (False, 12)
        await sandbox.remove_file("notes/a.txt")
        with pytest.raises(FileNotFoundError):
            await sandbox.read_file("notes/a.txt")
        shell = await sandbox.execute("ls")
        assert shell.exit_code == 127 and "Python only" in shell.stderr
        await sandbox.aclose()

    asyncio.run(files())


def test_the_strands_page_runs_as_written():
    # tests/test_docs.py, for the page whose framework is in this venv only.
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parent.parent / "test_docs.py"
    spec = importlib.util.spec_from_file_location("test_docs", path)
    docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs)
    docs.run_page("docs/strands.md")


def test_the_frameworks_private_names_the_integration_uses_are_there(private_api):
    # ptc_engine.integrations.strands runs each of a program's calls with the agent's own
    # executor (`ToolExecutor._stream`, as a direct call does) and refuses interrupts in them.
    api = private_api("strands-agents", "ptc_engine.integrations.strands")
    executor = api.get("strands.tools.executors._executor", "ToolExecutor")
    where = "strands.tools.executors._executor.ToolExecutor"
    api.has(executor, where, "_stream")
    api.takes(executor._stream, f"{where}._stream", "agent", "tool_use", "tool_results", "invocation_state")
    if not isinstance(api.get("strands.types._events", "ToolInterruptEvent"), type):
        api.fail("strands.types._events.ToolInterruptEvent", "is no longer a class")
    agent = Agent(model=Scripted())
    api.has(agent, "strands.Agent()", "_interrupt_state")
    api.has(agent._interrupt_state, "strands.Agent()._interrupt_state", "deactivate")
