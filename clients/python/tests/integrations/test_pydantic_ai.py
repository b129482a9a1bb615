"""Pydantic AI harness' code mode with `PtcCodeMode`, driven by Pydantic AI's own deterministic
`FunctionModel`: the model "writes" programs, the agent's tools run on the host through the
harness' nested ToolManager, and what the program printed and returned comes back to the model."""

import asyncio

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.exceptions import UnexpectedModelBehavior, UserError

from ptc_engine import ServerUnavailable
from ptc_engine.integrations.pydantic_ai import PtcCodeMode


def scripted(*programs):
    """A model that sends each program as a `run_code` call in turn, then says "done"; it
    keeps what it was shown."""
    seen = {"returns": [], "tools": None}

    def model(messages, info):
        seen["tools"] = info.function_tools
        for part in messages[-1].parts:
            if isinstance(part, (ToolReturnPart, RetryPromptPart)):
                seen["returns"].append(part.content)
        step = sum(1 for m in messages if isinstance(m, ModelResponse))
        if step < len(programs):
            program = programs[step]
            args = program if isinstance(program, dict) else {"code": program}
            return ModelResponse(parts=[ToolCallPart("run_code", args)])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(model), seen


def agent_with(model, url, key, **options):
    agent = Agent(model, capabilities=[PtcCodeMode(sandbox=url, api_key=key, **options)])
    both = {"double": asyncio.Event(), "label": asyncio.Event()}

    async def meet(me):
        both[me].set()
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in both.values())), 10)

    @agent.tool_plain
    async def double(x: int) -> int:
        """Double x."""
        await meet("double")
        return x * 2

    @agent.tool_plain
    def record(value: int) -> int:
        """Records a value."""
        return value

    @agent.tool_plain
    async def label(x: int) -> str:
        """A label for x."""
        await meet("label")
        return f"#{x}"

    return agent


async def test_a_program_gathers_two_tools_and_its_output_and_value_come_back(url, key, sandboxes):
    code = "import asyncio\na, b = await asyncio.gather(double(x=2), label(x=5))\nprint('computed')\n[a, b]"
    model, seen = scripted(code)
    result = await agent_with(model, url, key).run("go")
    assert result.output == "done"
    # Given `sandbox=url`, the integration made its own Sandbox: in this process when `url` is None.
    assert {s.url for s in sandboxes} == {url or "in-process"}, sandboxes
    assert seen["returns"] == [{"output": "computed\n", "result": [4, "#5"]}]
    # The nested calls are in the history as the harness records them.
    returned = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returned[0].metadata["code_mode"] is True
    assert sorted(p.tool_name for p in returned[0].metadata["tool_calls"].values()) == ["double", "label"]


async def test_the_model_is_told_it_has_cpython_and_async_tools(url, key):
    model, seen = scripted()
    await agent_with(model, url, key).run("go")
    (run_code,) = seen["tools"]
    assert run_code.name == "run_code"
    assert "CPython 3.14" in run_code.description and "Monty" not in run_code.description
    assert "async def double(*, x: int) -> int" in run_code.description


async def test_state_lasts_across_calls_until_restart(url, key):
    model, seen = scripted(
        "class Counter:\n    n = 0\nc = Counter()\nc.n += 1\nc.n",
        "c.n += 1\nc.n",
        {"code": "'c' in globals()", "restart": True},
    )
    await agent_with(model, url, key).run("go")
    assert seen["returns"] == [1, 2, False]


async def test_errors_come_back_as_retries_with_the_traceback(url, key):
    model, seen = scripted(
        "print('before')\nraise ValueError('boom')",
        "await double(x='not a number')",
        "def broken(:\n  pass",
    )
    await agent_with(model, url, key).run("go")
    runtime, bad_input, syntax = seen["returns"]
    assert runtime.startswith("Runtime error:\n[stdout before error]\nbefore\n") and "ValueError: boom" in runtime
    assert 'line 2, in <module>' in runtime
    # Refused before it ran, with the tool's signature: the model's next try can get it right.
    # The harness calls Monty's check against the tools' signatures a type error; so is this.
    assert bad_input.startswith("Type error in code:"), bad_input
    assert "ToolCheckError" in bad_input and "double(x=...) takes" in bad_input, bad_input
    assert syntax.startswith("Syntax error in code:"), syntax


async def test_a_tool_result_with_no_json_form_names_the_tool(url, key):
    class Thing:
        pass

    model, seen = scripted("try:\n    await opaque()\nexcept ToolError as e:\n    print(e)")
    agent = agent_with(model, url, key)

    @agent.tool_plain
    def opaque() -> object:
        """Returns a thing."""
        return Thing()

    await agent.run("go")
    (said,) = seen["returns"]
    assert said["output"].startswith("tool 'opaque' returned a value that is not JSON (Thing: "), said


async def test_a_stopped_program_resets_the_session_and_says_so(url, key):
    model, seen = scripted("x = 1", "import time\nwhile True: time.sleep(0.01)", "'x' in globals()")
    await agent_with(model, url, key, timeout=1.5).run("go")
    stopped = seen["returns"][1]
    assert "session was reset" in stopped, stopped
    assert seen["returns"][2] is False


async def test_the_nested_call_budget_is_the_harness_and_the_calls_made_are_listed(url, key):
    model, seen = scripted("for i in range(10):\n    await record(value=i)")
    await agent_with(model, url, key, max_tool_calls=3).run("go")
    message = seen["returns"][0]
    assert "allows 3 nested tool calls" in message, message
    assert "3 nested tool calls started" in message and "record({'value': 0})" in message, message


async def test_more_rounds_than_the_servers_default(url, key):
    model, seen = scripted("t = 0\nfor i in range(30):\n    t += await record(value=i)\nt")
    await agent_with(model, url, key).run("go")
    assert seen["returns"] == [sum(range(30))]


def test_monty_only_options_and_impossible_timeouts_are_refused_with_what_to_use():
    with pytest.raises(UserError, match="configure Monty"):
        PtcCodeMode(resource_limits={"max_duration_secs": 5})
    with pytest.raises(ValueError, match="between 1 and 300 seconds"):
        PtcCodeMode(timeout=0.2)


async def test_what_the_model_sees_and_what_you_see(url, key):
    # docs/pydantic-ai.md: a failed program is a retry the model reads, until the harness'
    # max_retries, past which agent.run raises; a server that cannot be reached is raised at
    # once, and the model is told nothing.
    model, seen = scripted("raise ValueError('one')", "raise ValueError('two')", "raise ValueError('three')")
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries count of 1"):
        await agent_with(model, url, key, max_retries=1).run("go")
    assert [r.splitlines()[-1] for r in seen["returns"]] == ["ValueError: one"], seen["returns"]
    model, seen = scripted("1 + 1")
    with pytest.raises(ServerUnavailable, match="cannot reach the ptc-engine server at http://127.0.0.1:9"):
        await agent_with(model, "http://127.0.0.1:9", key).run("go")
    assert seen["returns"] == []


def test_the_harness_private_names_the_integration_uses_are_there(private_api):
    # ptc_engine.integrations.pydantic_ai subclasses the harness' toolset and replaces its
    # `_execute_code` (the harness has no executor interface), reaching into its private modules.
    api = private_api("pydantic-ai-harness", "ptc_engine.integrations.pydantic_ai")
    toolset = "pydantic_ai_harness.code_mode._toolset"
    tail = api.get(toolset, "_RUN_CODE_DESCRIPTION_TAIL")
    if not isinstance(tail, str) or "\n" not in tail:
        api.fail(f"{toolset}._RUN_CODE_DESCRIPTION_TAIL", "is no longer text of several lines (its first is dropped)")
    run_code_tool = api.get(toolset, "_RunCodeTool")
    api.has(run_code_tool, f"{toolset}._RunCodeTool", "tool_def", "callable_defs", "sanitized_to_original", "wrapped_tools")
    api.takes(api.get(toolset, "_get_sigs_and_conflicting"), f"{toolset}._get_sigs_and_conflicting", "callable_defs")
    execution = api.get(toolset, "RunCodeExecution")
    api.has(
        execution,
        f"{toolset}.RunCodeExecution",
        "capture",
        "budget_exhausted",
        "nested_calls",
        "nested_returns",
        "usage_limit_exceeded",
    )
    api.takes(execution.next_tool_call_id, f"{toolset}.RunCodeExecution.next_tool_call_id", "max_tool_calls")
    api.takes(execution.finish, f"{toolset}.RunCodeExecution.finish", "call_part", "outcome")
    api.has(api.get(toolset, "NestedCallOutcome"), f"{toolset}.NestedCallOutcome", "content", "error")
    api.takes(api.get(toolset, "global_mode_is_sequential"), f"{toolset}.global_mode_is_sequential", "get_mode")
    api.takes(api.get(toolset, "run_nested_call"), f"{toolset}.run_nested_call", "tool_manager", "call_part")
    api.takes(
        api.get(toolset, "_describe_started_calls"), f"{toolset}._describe_started_calls", "calls", "returns"
    )
    api.takes(api.get(toolset, "_model_safe_result"), f"{toolset}._model_safe_result", "value")
    api.has(api.get(toolset, "_TOOL_RETURN_CONTENT_TA"), f"{toolset}._TOOL_RETURN_CONTENT_TA", "validate_python")
    if not isinstance(api.get("pydantic_ai_harness.code_mode._parts", "RUN_CODE_TOOL_NAME"), str):
        api.fail("pydantic_ai_harness.code_mode._parts.RUN_CODE_TOOL_NAME", "is no longer a tool name")
    code_mode_toolset = api.get("pydantic_ai_harness.code_mode", "CodeModeToolset")
    where = "pydantic_ai_harness.code_mode.CodeModeToolset"
    api.has(code_mode_toolset, where, "_execute_code", "_as_run_code_tool")
    api.takes(code_mode_toolset._execute_code, f"{where}._execute_code", "code", "ctx", "tool", "execution")
    api.takes(code_mode_toolset._as_run_code_tool, f"{where}._as_run_code_tool", "tool")
