"""Microsoft Agent Framework with `PtcCodeActProvider`, driven by a scripted chat client built
the way the framework's docs build a custom one (`FunctionInvocationLayer` over
`BaseChatClient`): the model calls `execute_code`, the framework's function-invocation loop
runs it, the provider's tools run on the host, and the result comes back to the model."""

import asyncio
import json
import typing

from agent_framework import Agent, BaseChatClient, ChatResponse, Content, FunctionInvocationLayer, Message, tool

from ptc_engine.integrations.agent_framework import PtcCodeActProvider, PtcExecuteCodeTool


class Scripted(FunctionInvocationLayer, BaseChatClient):
    """Answers with an `execute_code` call for each program in turn, then with "done"; keeps
    the function results and the instructions and tools it was sent."""

    def __init__(self, *programs):
        super().__init__()
        self.programs = list(programs)
        self.results = []
        self.requests = []

    async def _inner_get_response(self, *, messages, stream, options, **kwargs):
        self.requests.append((list(messages), dict(options)))
        for content in messages[-1].contents:
            if content.type == "function_result":
                # An error Content (as Monty's CodeAct returns one) travels in `items`.
                errors = [f"{i.message}: {i.error_details}" for i in content.items or [] if i.type == "error"]
                self.results.append("\n".join(errors) or content.result)
        if self.programs:
            code = self.programs.pop(0)
            call = Content.from_function_call(f"c{len(self.results)}", "execute_code", arguments={"code": code})
            return ChatResponse(messages=Message("assistant", [call]))
        return ChatResponse(messages=Message("assistant", ["done"]))


started = {}


async def meet(me):
    started[me].set()
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 10)


@tool
async def add(a: int, b: int) -> int:
    """Adds two integers."""
    await meet("add")
    return a + b


@tool
async def weather(city: str) -> dict:
    """The weather in a city."""
    await meet("weather")
    return {"city": city, "temp": 21}


@tool
def shout(text: str) -> str:
    """Upper-cases text."""
    return text.upper()


@tool
def refuse(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"refused: {reason}")


def agent(client, url, key):
    started.clear()
    started.update(add=asyncio.Event(), weather=asyncio.Event())
    provider = PtcCodeActProvider(tools=[add, weather, shout, refuse], sandbox=url, api_key=key)
    return Agent(client=client, context_providers=[provider])


def text(result):
    return result if isinstance(result, str) else json.dumps(result)


async def test_a_program_gathers_two_tools_and_output_and_value_reach_the_model(url, key, sandboxes):
    client = Scripted(
        "a, w = await asyncio.gather(add(a=2, b=3), weather(city='Oslo'))\nprint(a, w['temp'])\n{'sum': a}"
    )
    response = await agent(client, url, key).run("go")
    assert response.text == "done"
    # Given `sandbox=url`, the integration made its own Sandbox: in this process when `url` is None.
    assert {s.url for s in sandboxes} == {url or "in-process"}, sandboxes
    assert len(client.results) == 1
    assert "5 21" in text(client.results[0]) and '{"sum": 5}' in text(client.results[0]), client.results
    messages, options = client.requests[0]
    (execute_code,) = options["tools"]
    assert execute_code.name == "execute_code"
    instructions = options.get("instructions") or ""
    assert "`add`" in instructions and "CPython 3.14" in instructions, instructions


async def test_tool_failures_and_program_failures_come_back_in_words(url, key):
    client = Scripted(
        "try:\n    await refuse(reason='x')\nexcept ToolError as e:\n    print(e)",
        "await call_tool('shout', text='quiet')",
        "print('before')\nraise KeyError('k')",
    )
    await agent(client, url, key).run("go")
    caught, via_call_tool, failed = (text(r) for r in client.results)
    assert "refused: x" in caught, caught
    assert via_call_tool == '"QUIET"', via_call_tool
    assert failed.startswith("Execution error: [stdout before error]\nbefore\n"), failed
    assert "KeyError: 'k'" in failed and 'File "<code>", line 2' in failed, failed


async def test_the_tool_alone_runs_what_monty_refuses(url, key):
    execute_code = PtcExecuteCodeTool(tools=[add], sandbox=url, api_key=key)
    started.clear()
    started.update(add=asyncio.Event())
    contents = await execute_code.invoke(
        arguments={"code": "class A:\n    pass\nclass B(A):\n    pass\ndef g():\n    yield 1\n[B.__mro__[1].__name__, list(g())]"}
    )
    assert [c.text for c in contents] == ['["A", [1]]']


async def test_what_the_model_sees_and_what_you_see(url, key, caplog):
    # docs/agent-framework.md: a failed program is an error Content the model reads (above); a
    # server that cannot be reached is an exception the function-invocation loop logs and
    # answers the model with "Error: Function failed." (the reason too with
    # include_detailed_errors); the run goes on.
    client = Scripted("print(1)")
    provider = PtcCodeActProvider(tools=[shout], sandbox="http://127.0.0.1:9", api_key=key)
    response = await Agent(client=client, context_providers=[provider]).run("go")
    assert response.text == "done" and client.results == ["Error: Function failed."], client.results
    assert "ServerUnavailable" in caplog.text, caplog.text
    client = Scripted("print(1)")
    client.function_invocation_configuration["include_detailed_errors"] = True
    await Agent(client=client, context_providers=[provider]).run("go")
    (said,) = client.results
    assert said.startswith("Error: Function failed. Exception: cannot reach the ptc-engine server at http://127.0.0.1:9"), said


def test_the_frameworks_private_names_the_integration_uses_are_there(private_api):
    # ptc_engine.integrations.agent_framework imports these from `agent_framework._tools`.
    api = private_api("agent-framework-core", "ptc_engine.integrations.agent_framework")
    modes = set(typing.get_args(api.get("agent_framework._tools", "ApprovalMode")))
    if not {"always_require", "never_require"} <= modes:
        api.fail("agent_framework._tools.ApprovalMode", f"no longer has always_require and never_require ({modes})")
    api.takes(api.get("agent_framework._tools", "normalize_tools"), "agent_framework._tools.normalize_tools", "tools")
