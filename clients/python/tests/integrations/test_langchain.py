"""LangChain with `ptc_code_tool`, driven by LangChain's own fake chat model through a real
`langchain.agents.create_agent` graph (LangGraph): the model calls the code tool, the program
calls two LangChain tools with `asyncio.gather`, and what it printed comes back as the tool
message."""

import asyncio

import pytest

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import ToolException, tool

from ptc_engine import ServerUnavailable
from ptc_engine.integrations.langchain import ptc_code_tool


class Scripted(GenericFakeChatModel):
    """LangChain's fake chat model, which needs `bind_tools` to sit in an agent."""

    def bind_tools(self, tools, **kwargs):
        self._tools = tools
        return self


def model_calling(*programs):
    turns = [
        AIMessage(content="", tool_calls=[{"name": "run_tools_with_code", "args": {"code": p}, "id": f"c{i}"}])
        for i, p in enumerate(programs)
    ]
    return Scripted(messages=iter([*turns, AIMessage(content="done")]))


started = {}


async def meet(me):
    started[me].set()
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 10)


@tool
async def get_weather(city: str) -> dict:
    """The weather in a city."""
    await meet("get_weather")
    return {"city": city, "temp": 21}


@tool("get-time")
async def get_time(city: str) -> str:
    """The local time in a city."""
    await meet("get-time")
    return '{"city": "%s", "time": "12:00"}' % city


@tool
def refuse(reason: str) -> str:
    """Always fails."""
    raise ToolException(f"refused: {reason}")


def tool_messages(state):
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


async def test_a_program_gathers_two_langchain_tools_and_only_its_print_comes_back(url, key, sandboxes):
    started.clear()
    started.update({"get_weather": asyncio.Event(), "get-time": asyncio.Event()})
    code = (
        "w, t = await asyncio.gather(get_weather(city='Oslo'), get_time(city='Oslo'))\n"
        "print(w['temp'], t['time'])"
    )
    agent = create_agent(model_calling(code), tools=[ptc_code_tool([get_weather, get_time], sandbox=url, api_key=key)])
    state = await agent.ainvoke({"messages": [("user", "go")]})
    (message,) = tool_messages(state)
    assert message.content == "21 12:00\n" and message.status == "success"
    assert state["messages"][-1].content == "done"
    # Given `sandbox=url`, the integration made its own Sandbox: in this process when `url` is None.
    assert {s.url for s in sandboxes} == {url or "in-process"}, sandboxes


async def test_failures_come_back_as_error_tool_messages(url, key):
    agent = create_agent(
        model_calling(
            "try:\n    await refuse(reason='no')\nexcept ToolError as e:\n    print(e)",
            "print('before')\nimport missing_module",
        ),
        tools=[ptc_code_tool([refuse], sandbox=url, api_key=key)],
    )
    state = await agent.ainvoke({"messages": [("user", "go")]})
    caught, failed = tool_messages(state)
    assert caught.content == "refused: no\n" and caught.status == "success"
    assert failed.status == "error", failed
    assert "before" in failed.content and "ModuleNotFoundError" in failed.content, failed.content


async def test_what_the_model_sees_and_what_you_see(url, key):
    # docs/langchain.md: a failed program is an error ToolMessage (above); a server that cannot
    # be reached is no ToolException, so the agent's run raises it and the model sees nothing.
    model = model_calling("print(1)")
    agent = create_agent(model, tools=[ptc_code_tool([refuse], sandbox="http://127.0.0.1:9", api_key=key)])
    with pytest.raises(ServerUnavailable, match="cannot reach the ptc-engine server at http://127.0.0.1:9"):
        await agent.ainvoke({"messages": [("user", "go")]})
