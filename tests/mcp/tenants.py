"""Two keys on one `/mcp` endpoint, with the official MCP Python SDK's client at protocol
2026-07-28, where `llm_query` parks the execution and the client retries with the answer:

    python tenants.py URL ALPHA_KEY BETA_KEY

- a retry of alpha's parked (and hibernated) execution sent with beta's key is refused as an
  unknown handle is, whichever way it comes, and alpha's own retry still finds it parked and
  resumes it;
- one key parks at most 100 executions at once; past that its next is refused in words, while
  the other key still parks its own.
"""

import asyncio
import sys

import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client


def log(*args):
    print(*args, flush=True)


def connect(url, key):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120))
    return streamable_http_client(url, http_client=http)


async def sample(context, params):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="sampled"), model="echo"
    )


async def park(client, timeout_ms=20000):
    asked = await client.session.call_tool(
        "execute_code",
        {"code": "print(await llm_query(prompt='x'))", "timeout_ms": timeout_ms},
        allow_input_required=True,
    )
    return asked


def answers(asked):
    """What a sampling client answers each of the execution's llm_query calls."""
    return {key: types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="sampled"), model="echo"
    ) for key in asked.input_requests}


async def refused(call):
    """The error a retry gets; fails if it was not refused."""
    try:
        await call
    except Exception as e:
        return str(e)
    raise AssertionError("another key's retry was not refused")


async def foreign_retry(url, alpha_key, beta_key):
    async with Client(connect(url, alpha_key), sampling_callback=sample) as alpha, \
            Client(connect(url, beta_key), sampling_callback=sample) as beta, \
            Client(connect(url, beta_key), sampling_callback=sample, mode="legacy") as beta_legacy:
        asked = await park(alpha)
        assert isinstance(asked, types.InputRequiredResult) and asked.request_state, asked
        # Past a second the parked execution has hibernated: the retries find it asleep.
        await asyncio.sleep(1.5)
        state, given = asked.request_state, answers(asked)
        unknown = await refused(beta.session.call_tool("execute_code", {}, request_state="0" * 32, input_responses=given))
        assert "no longer waiting" in unknown, unknown
        # Beta with alpha's handle, every way a retry can come: with the answers, with a
        # program of its own, from an MCP session of the older protocol. Each is refused
        # exactly as an unknown handle is, and nothing of alpha's execution is taken.
        for attempt in [
            beta.session.call_tool("execute_code", {}, request_state=state, input_responses=given),
            beta.session.call_tool("execute_code", {"code": "print(1)"}, request_state=state),
            beta_legacy.session.call_tool("execute_code", {}, request_state=state, input_responses=given),
        ]:
            assert await refused(attempt) == unknown
        other = await beta.session.call_tool("describe_tools", {}, request_state=state, input_responses=given)
        assert not other.is_error, other
        done = await alpha.session.call_tool("execute_code", {}, request_state=state, input_responses=given)
        assert not done.is_error and done.structured_content["stdout"] == "sampled\n", done
    log("another key's retry: ok")


async def parked_share(url, alpha_key, beta_key):
    async with Client(connect(url, alpha_key), sampling_callback=sample) as alpha, \
            Client(connect(url, beta_key), sampling_callback=sample) as beta:
        parked = await asyncio.gather(*[park(alpha, 15000) for _ in range(100)])
        assert all(isinstance(p, types.InputRequiredResult) for p in parked), parked
        refused = await park(alpha, 15000)
        assert isinstance(refused, types.CallToolResult) and refused.is_error, refused
        text = refused.content[0].text
        assert "100 executions of this key already wait" in text, text
        mine = await park(beta, 15000)
        assert isinstance(mine, types.InputRequiredResult), mine
        done = await beta.session.call_tool(
            "execute_code", {}, request_state=mine.request_state, input_responses=answers(mine)
        )
        assert done.structured_content["stdout"] == "sampled\n", done
        # Alpha answers its own: each place is free again.
        for asked in parked:
            await alpha.session.call_tool(
                "execute_code", {}, request_state=asked.request_state, input_responses=answers(asked)
            )
        again = await park(alpha, 15000)
        assert isinstance(again, types.InputRequiredResult), again
    log("parked share: ok")


async def main():
    url, alpha_key, beta_key = sys.argv[1:4]
    await foreign_retry(url, alpha_key, beta_key)
    await parked_share(url, alpha_key, beta_key)
    log("ALL OK")


asyncio.run(main())
