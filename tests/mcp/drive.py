"""Drives ptc-engine's MCP front end with the official MCP Python SDK's client (`mcp` on PyPI),
as an agent platform would: over stdio (`ptc-engine mcp --config FILE`) or Streamable HTTP.

    python drive.py --fs-root DIR stdio BINARY mcp --config FILE
    python drive.py --fs-root DIR http URL KEY

Each scenario asserts what a model would see; a failed assertion exits non-zero. With
`--pause`, after cancelling an execution it prints `MARK cancelled` and waits for a line on
stdin, so the test can check the instance was freed while this session is still open.
"""

import argparse
import asyncio
import os
import re
import sys
import time

import httpx2
from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client


def log(*args):
    print(*args, flush=True)


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def run(client, code, session=None, language=None, **kwargs):
    args = {"code": code} if session is None else {"code": code, "session": session}
    if language is not None:
        args["language"] = language
    result = await client.call_tool("execute_code", args, **kwargs)
    return result, text_of(result), result.structured_content


async def javascript_sessions(client, persistent):
    """JavaScript and TypeScript programs keep their state in sessions of their own: the
    connection's (persistent), or one they name; a Python program never sees it."""
    code = "var rows = [3, 1, 2];\nfunction top() { return Math.max(...rows) }"
    if persistent:
        result, text, sc = await run(client, code, language="javascript")
        assert not result.is_error, text
        result, text, sc = await run(client, "const more: number[] = [7];\nrows.push(...more);\ntop()", language="typescript")
        assert not result.is_error and sc["return_value"] == 7, text
        result, text, sc = await run(client, "print('rows' in globals(), 'seen' in globals())")
        assert sc["stdout"] == "False True\n", sc
    else:
        result, text, sc = await run(client, code, session="new", language="javascript")
        sid = sc["session"]
        result, text, sc = await run(client, "rows.push(7);\ntop()", session=sid, language="javascript")
        assert not result.is_error and sc["return_value"] == 7 and sc["session"] == sid, text
        result, text, sc = await run(client, "print(rows)", session=sid)
        assert result.is_error and f'session "{sid}" runs javascript programs and this one is python' in text, text
    log(f"javascript session (persistent={persistent}): ok")


async def named_sessions(client, desc):
    """Protocol 2026-07-28 over HTTP has no MCP sessions: a program names the session it runs
    in, and its globals and /mnt/data files are there for the next program that names it."""
    assert 'session="new"' in desc and "/mnt/data" in desc, desc
    code = "import statistics\nseen = [3, 1, 2]\ndef med():\n    return statistics.median(seen)\n"
    code += "open('/mnt/data/seen.txt', 'w').write('3 1 2')"
    result, text, sc = await run(client, code, session="new")
    assert not result.is_error, text
    sid = sc["session"]
    assert text.endswith(f'[session] {sid} (pass session="{sid}" to continue in it)'), text
    result, text, sc = await run(client, "seen.append(10)\nprint(med(), len(seen), open('/mnt/data/seen.txt').read())", session=sid)
    assert sc["stdout"] == "2.5 4 3 1 2\n" and sc["session"] == sid, sc
    # Another session sees neither the globals nor the files; a one-off program has no session.
    code = "import os\nprint('seen' in globals(), os.path.exists('/mnt/data/seen.txt'))"
    result, text, sc = await run(client, code, session="new")
    assert sc["stdout"] == "False False\n" and sc["session"] != sid, sc
    result, text, sc = await run(client, "print('seen' in globals())")
    assert sc["stdout"] == "False\n" and "session" not in sc and "[session]" not in text, sc
    # Past the tenant's file quota (2 MiB in this test): an error of kind file_quota, what the
    # program wrote is gone, and the session with its earlier state goes on.
    result, text, sc = await run(client, "open('/mnt/data/big.bin', 'wb').write(b'x' * (3 << 20))\nprint('wrote')", session=sid)
    assert result.is_error and sc["error"]["kind"] == "file_quota", sc
    assert "quota" in text and "delete files you no longer need" in text, text
    # The quota is checked every 100 ms while a program runs, and at its end. On a loaded
    # machine the write can outlast a check (a CI run on 2 cores saw it): the program is then
    # stopped mid-way and its session ends. Otherwise the program ends and the session goes on.
    if "stopped mid-way" in text:
        assert "so its session has ended" in text and "wrote" not in sc["stdout"], text
        result, text, sc = await run(client, "print('seen' in globals())", session=sid)
        assert text.startswith(f'[session] session "{sid}" is not open') and sc["stdout"] == "False\n", text
    else:
        assert "wrote" in sc["stdout"], sc
        result, text, sc = await run(client, "import os\nprint(len(seen), sorted(os.listdir('/mnt/data')))", session=sid)
        assert sc["stdout"] == "4 ['seen.txt']\n", sc
    # An id that is not open (ended, or never was): the program runs in a new session and the
    # model is told its earlier state is gone.
    result, text, sc = await run(client, "print('seen' in globals())", session="not-a-session")
    assert text.startswith('[session] session "not-a-session" is not open'), text
    assert sc["stdout"] == "False\n" and sc["session"] not in (sid, "not-a-session"), sc
    result = await client.call_tool("execute_code", {"code": "pass", "session": 7})
    assert result.is_error and "must be" in text_of(result), result
    log("named sessions: ok")


async def scenarios(client, fs_root, pause, persistent):
    # The tool list: execute_code's description is the model's only view of the tools.
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"execute_code", "describe_tools"}, tools
    desc = tools["execute_code"].description
    assert tools["execute_code"].output_schema is not None
    # (The notes servers list three tools per page: these come from every page.)
    for line in ["notes.search_notes(query: str)", "notes.get_body(id: int)", "web.pid()", "fs.read_text_file(path: str"]:
        assert line in desc, f"{line!r} missing from:\n{desc}"
    assert "Not callable from code:" in desc and "notes.delete_note (it is not marked read-only" in desc, desc
    assert "fs.write_file" in desc.split("Not callable from code:")[1], desc
    log(f"description: {len(desc)} chars")

    # Gather over three servers (stdio Python, Streamable HTTP Python, npm filesystem).
    code = f"""
found, stats, body, text, far = await asyncio.gather(
    notes.search_notes(query="rust"), notes.note_stats(), notes.get_body(id=2),
    fs.read_text_file(path={fs_root + '/hello.txt'!r}), web.search_notes(query="python"))
print(len(found["result"]), stats["count"], body)
print(text if isinstance(text, str) else text["content"].strip())
print(far["result"][0]["title"])
return {{"ids": [n["id"] for n in found["result"]]}}
"""
    result, text, sc = await run(client, code)
    assert not result.is_error, text
    assert sc["stdout"] == "2 3 gather independent awaits\nhello from the filesystem\npython tips\n", sc
    assert sc["return_value"] == {"ids": [1, 3]}, sc
    assert sc["success"] is True and sc["error"] is None
    names = sorted(c["tool_name"] for c in sc["tool_calls"])
    assert names == ["fs.read_text_file", "notes.get_body", "notes.note_stats", "notes.search_notes", "web.search_notes"], names
    assert "[return value]" in text
    log("gather: ok")

    # The same servers from JavaScript and TypeScript (`language`): Promise.all in one round,
    # a tool's failure a ToolError, TypeScript's types erased.
    assert 'language="javascript"' in desc and tools["execute_code"].input_schema["properties"]["language"], desc
    code = f"""
const [found, body, text] = await Promise.all([
  notes.search_notes({{query: "rust"}}), notes.get_body({{id: 2}}),
  fs.read_text_file({{path: {fs_root + '/hello.txt'!r}}})]);
console.log(found.result.length, body, typeof text === "string" ? text : text.content.trim());
try {{ await notes.fail({{message: "boom"}}); }} catch (e) {{ console.log(e.name, e.message.includes("boom")); }}
({{ids: found.result.map((n) => n.id)}})
"""
    result, text, sc = await run(client, code, language="javascript")
    assert not result.is_error, text
    assert sc["stdout"] == "2 gather independent awaits hello from the filesystem\nToolError true\n", sc
    assert sc["return_value"] == {"ids": [1, 3]}, sc
    names = sorted(c["tool_name"] for c in sc["tool_calls"])
    assert names == ["fs.read_text_file", "notes.fail", "notes.get_body", "notes.search_notes"], names
    code = "interface Stats { count: number }\nconst s = (await notes.note_stats()) as Stats;\nconst n: number = s.count;\nn"
    result, text, sc = await run(client, code, language="typescript")
    assert not result.is_error and sc["return_value"] == 3, text
    result, text, sc = await run(client, "const x = 1;\nnull.y", language="javascript")
    assert result.is_error and "TypeError" in text and "program.js:2" in text, text
    result, text, sc = await run(client, "1", language="rust")
    assert result.is_error and '"language" must be' in text, text
    # Checked before it runs, in TypeScript's words; the tools as TypeScript declarations.
    result, text, sc = await run(client, "console.log('first');\nawait notes.serch_notes({query: 'rust'})", language="javascript")
    assert result.is_error and sc["stdout"] == "" and "the program was not run" in text, text
    assert "line 2: notes has no tool \"serch_notes\"; did you mean notes.search_notes(args: { query: string })" in text, text
    described = await client.call_tool("describe_tools", {"names": ["notes.search_notes"], "language": "typescript"})
    stub = text_of(described)
    assert "declare namespace notes {" in stub and "function search_notes(args: { query: string })" in stub, stub
    log("javascript and typescript: ok")

    # Globals persist from one execute_code to the next in one MCP session (stdio; HTTP under
    # protocol 2026-07-28 has no sessions, and the description must not promise it).
    assert ("persist from one execute_code call" in desc) == persistent, desc
    result, text, sc = await run(client, "import statistics\nseen = [3, 1, 2]\ndef med():\n    return statistics.median(seen)")
    assert not result.is_error, text
    result, text, sc = await run(client, "print('seen' in globals())")
    assert sc["stdout"] == f"{persistent}\n", sc
    if persistent:
        result, text, sc = await run(client, "seen.append(10)\nprint(med(), len(seen))")
        assert sc["stdout"] == "2.5 4\n", sc
    else:
        await named_sessions(client, desc)
    log(f"session (persistent={persistent}): ok")
    await javascript_sessions(client, persistent)

    # A stdio server inherits a few variables from ptc-engine, never its secrets.
    result, text, sc = await run(client, "print(' '.join((await notes.environment())['result']))")
    names = sc["stdout"].split()
    assert "PATH" in names and "PTC_CANARY" not in names and not any(n.startswith("PTC_") for n in names), names
    log("environment: ok")

    # A tool error is a ToolError the program can catch.
    result, text, sc = await run(client, 'try:\n    await notes.fail(message="boom")\nexcept ToolError as e:\n    print("caught:", e)')
    assert not result.is_error and "caught:" in sc["stdout"] and "boom" in sc["stdout"], sc
    assert sc["tool_calls"][0]["has_error"] is True
    log("tool error: ok")

    # A tool that is not callable: a clear error naming what is.
    result, text, sc = await run(client, "await notes.delete_note(id=1)")
    assert result.is_error, text
    assert "notes has no callable tool 'delete_note'" in text and "search_notes" in text, text
    assert sc["error"]["kind"] == "python_error"
    result, text, sc = await run(client, "await search_notes(query='x')")
    assert result.is_error and "call it as `await notes.search_notes(...)`" in text, text
    log("not callable: ok")

    # A misspelt tool is refused before the program runs, with what it likely meant.
    result, text, sc = await run(client, "print('first')\nawait notes.serch_notes(query='rust')")
    assert result.is_error and sc["stdout"] == "", sc
    assert "did you mean notes.search_notes(query: str)" in text and "the program was not run" in text, text
    log("checked before running: ok")

    # A tool the operator marked for approval (web's "approve"), from a client that cannot ask
    # its user (no elicitation): callable, and each call refused in words the model can act on.
    assert "web.delete_note(id: int, _reason?: str)  # asks the user first" in desc, desc
    code = 'try:\n    await web.delete_note(id=1)\nexcept ToolError as e:\n    print(e)'
    result, text, sc = await run(client, code)
    assert not result.is_error, text
    assert "web.delete_note needs the user's approval, and this MCP client cannot ask for it" in sc["stdout"], sc
    log("approval without elicitation: ok")

    # The server crashes mid-call: ToolError, and the next call restarts it.
    code = """
before = await notes.pid()
try:
    await notes.crash()
except ToolError as e:
    print("crash:", e)
after = await notes.pid()
print("restarted:", before != after)
"""
    result, text, sc = await run(client, code)
    assert not result.is_error, text
    assert "stopped while handling notes.crash" in sc["stdout"] and "restarted: True" in sc["stdout"], sc
    log("crash and restart: ok")

    # A downstream call that hangs is cut off by the server's timeoutMs (2 s for notes).
    start = time.monotonic()
    result, text, sc = await run(client, 'try:\n    await notes.slow(seconds=30)\nexcept ToolError as e:\n    print(e)')
    assert "did not answer within 2 s" in sc["stdout"], sc
    assert time.monotonic() - start < 15
    log("hung call: ok")

    # describe_tools: the full stub for named tools; an unknown name lists the callable ones.
    result = await client.call_tool("describe_tools", {"names": ["notes.search_notes"]})
    stub = text_of(result)
    assert "class notes:" in stub and "async def search_notes(query: str" in stub and "Notes whose title" in stub, stub
    result = await client.call_tool("describe_tools", {"names": ["notes.nope"]})
    assert result.is_error and "notes.search_notes" in text_of(result)
    log("describe_tools: ok")

    # Progress: printed lines arrive while the program runs.
    seen = []

    async def on_progress(progress, total, message):
        seen.append(message or "")

    code = "for i in range(4):\n    print('step', i)\n    await asyncio.sleep(0.3)"
    result, text, sc = await run(client, code, progress_callback=on_progress)
    assert not result.is_error and sc["stdout"].count("step") == 4, sc
    assert any("step" in m for m in seen), seen
    # A chatty program: at most one notification per 250 ms (and one at once, one at the end),
    # each its last 1,000 characters, the last with the last line.
    seen.clear()
    code = "for i in range(3000):\n    print('line', i)\n    if i % 1000 == 0:\n        await asyncio.sleep(0.2)"
    began = time.monotonic()
    result, text, sc = await run(client, code, progress_callback=on_progress)
    took = time.monotonic() - began
    assert not result.is_error and 2 <= len(seen) <= 2 + took / 0.25, (len(seen), took)
    assert all(len(m) <= 1001 for m in seen) and seen[-1].endswith("line 2999"), seen
    log(f"progress: ok ({len(seen)} notifications in {took:.2f} s)")

    # A failing program: the error and a hint, with isError.
    result, text, sc = await run(client, "print('partial')\n1/0")
    assert result.is_error and "partial" in text and "ZeroDivisionError" in text, text
    result, text, sc = await client.call_tool("execute_code", {"code": "while True: pass", "timeout_ms": 1500}), None, None
    text = text_of(result)
    assert result.is_error and "Time limit exceeded" in text and "ran out of time" in text, text
    log("failures: ok")

    # The tool list changes downstream: the description follows, and programs can call it.
    # (The SDK's servers wrap a non-object result as {"result": ...} in structuredContent.)
    result, text, sc = await run(client, "print((await notes.enable_shout())['result'])")
    assert sc["stdout"] == "enabled\n", sc
    for _ in range(50):
        desc = {t.name: t for t in (await client.list_tools()).tools}["execute_code"].description
        if "notes.shout(text: str)" in desc:
            break
        await asyncio.sleep(0.1)
    assert "notes.shout(text: str)" in desc, desc
    result, text, sc = await run(client, "print((await notes.shout(text='hi'))['result'])")
    assert sc["stdout"] == "HI\n", sc
    log("list_changed: ok")

    # llm_query needs a client that samples; this one does not.
    code = 'try:\n    await llm_query(prompt="hi")\nexcept ToolError as e:\n    print(e)'
    result, text, sc = await run(client, code)
    assert "needs an MCP client that supports sampling" in sc["stdout"], sc
    log("llm_query without sampling: ok")

    # Cancellation: the client gives up (notifications/cancelled); the instance is freed.
    try:
        await client.call_tool("execute_code", {"code": "await asyncio.sleep(60)"}, read_timeout_seconds=1.0)
        raise AssertionError("the call should have timed out")
    except AssertionError:
        raise
    except BaseException as e:  # the SDK raises its timeout error
        log(f"cancelled: {type(e).__name__}")
    if pause:
        log("MARK cancelled")
        # In a thread: the event loop must keep running to close the abandoned request.
        await asyncio.to_thread(sys.stdin.readline)
    result, text, sc = await run(client, "print('after cancel', 'seen' in globals())")
    assert sc["stdout"] == "after cancel False\n", sc
    # The cancelled program stopped the session mid-way: the model is told its state is gone.
    if persistent:
        assert text.startswith("[session] the previous session ended (its execution ended with cancelled"), text
    log("cancellation: ok")


async def sample(context, params):
    """The sampling client's "model": echoes the prompt (and says whether a system prompt came)."""
    prompt = params.messages[0].content.text
    marker = "+system" if params.system_prompt else ""
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=f"sampled{marker}: {prompt}"), model="echo"
    )


async def abandoned(server, pause):
    """A client asked to sample (protocol 2026-07-28) that never retries: the parked execution
    ends at its deadline, and a late retry is told so."""
    async with Client(server, sampling_callback=sample) as client:
        asked = await client.session.call_tool(
            "execute_code", {"code": "await llm_query(prompt='x')", "timeout_ms": 1500}, allow_input_required=True
        )
        assert isinstance(asked, types.InputRequiredResult) and asked.request_state, asked
        if pause:
            log("MARK parked")
            await asyncio.to_thread(sys.stdin.readline)
        else:
            await asyncio.sleep(2.5)
        try:
            await client.session.call_tool("execute_code", {}, request_state=asked.request_state, input_responses={})
            raise AssertionError("a retry after the deadline should fail")
        except AssertionError:
            raise
        except Exception as e:
            assert "no longer waiting" in str(e), e
    log("abandoned sampling: ok")


async def with_sampling(server):
    """llm_query answered by a client that samples: two at once, then one after a tool call."""
    async with Client(server, sampling_callback=sample) as client:
        code = """
a, b = await asyncio.gather(llm_query(prompt="one"), llm_query(prompt="two"))
found = await notes.search_notes(query="rust")
c = await llm_query(prompt=f"summarise {len(found['result'])} notes", system="be brief")
print(a, "|", b, "|", c)
"""
        result, text, sc = await run(client, code)
        assert not result.is_error, text
        assert sc["stdout"] == "sampled: one | sampled: two | sampled+system: summarise 2 notes\n", sc
        names = [c["tool_name"] for c in sc["tool_calls"]]
        assert names == ["llm_query", "llm_query", "notes.search_notes", "llm_query"], names
    log("llm_query with sampling: ok")


ANSWERED = []
"""When `ask_user` answered (`time.monotonic()`)."""


async def ask_user(context, params):
    """The client's "user", asked through elicitation: takes half a second to answer (so that
    the program's other calls finish first), approves note 1 as it is, note 2 with another id,
    and refuses the rest."""
    await asyncio.sleep(0.5)
    ANSWERED.append(time.monotonic())
    assert "Its reason: note" in params.message and "notes.delete_note" in params.message, params.message
    if '"id": 1' in params.message:
        return types.ElicitResult(action="accept", content={"approve": True})
    if '"id": 2' in params.message:
        return types.ElicitResult(action="accept", content={"approve": True, "arguments": '{"id": 20}'})
    return types.ElicitResult(action="accept", content={"approve": False, "reason": "keep note 3"})


async def with_approvals(server):
    """A client that can ask its user: a write tool the default hides is callable with the
    user's approval. One gather: two read-only calls finish while three deletes wait for the
    user, who approves one, changes another's arguments and refuses the third. The deletes that
    ran carry their call's id to the server as an idempotency key."""
    async with Client(server, elicitation_callback=ask_user) as client:
        desc = {t.name: t for t in (await client.list_tools()).tools}["execute_code"].description
        assert "notes.delete_note(id: int, _reason?: str)  # asks the user first" in desc, desc
        code = """
import time
done = []
async def timed(label, call):
    value = await call
    done.append(label)
    return value
async def rm(i):
    try:
        return await notes.delete_note(id=i, _reason=f"note {i} is stale")
    except ToolError as e:
        return str(e)
found, body, a, b, c = await asyncio.gather(
    timed("search", notes.search_notes(query="rust")), timed("body", notes.get_body(id=1)),
    timed("rm1", rm(1)), timed("rm2", rm(2)), timed("rm3", rm(3)))
print(len(found["result"]), body, a["deleted"], b["deleted"], c)
print(done[:2])
return [a["key"], b["key"]]
"""
        seen = []

        async def on_progress(progress, total, message):
            seen.append((time.monotonic(), message or ""))

        result, text, sc = await run(client, code, progress_callback=on_progress)
        assert not result.is_error, text
        lines = sc["stdout"].splitlines()
        assert lines[0] == "2 borrow, don't clone 1 20 denied by the user: keep note 3", sc
        assert sorted(eval(lines[1])) == ["body", "search"], sc
        calls = {c["tool_call_id"]: c for c in sc["tool_calls"]}
        keys = sc["return_value"]
        assert all(k in calls and calls[k]["tool_name"] == "notes.delete_note" for k in keys), (keys, calls)
        assert calls[keys[1]]["args"] == {"id": 20}, calls[keys[1]]
        assert keys[0] != keys[1] and keys[0].startswith("call_"), keys
        # Progress named each call as it started, waited for the user (said before the user
        # answered) and ended, and the user's answers; never a call's arguments.
        said = "\n".join(m for _, m in seen)
        waiting = [t for t, m in seen if "[call] notes.delete_note is waiting for the user's approval" in m]
        assert waiting and waiting[0] < ANSWERED[0], (seen, ANSWERED)
        for line in ("notes.search_notes started", "notes.delete_note approved by the user", "notes.delete_note denied by the user"):
            assert f"[call] {line}" in said, seen
        assert re.search(r"\[call\] notes\.search_notes finished in \d+ ms", said), seen
        assert said.count("[call] notes.delete_note finished in") == 2, seen
        assert "stale" not in said and '"id"' not in said, seen
    log(f"approval with elicitation: ok ({len(seen)} progress notifications)")


def connect(args):
    if args.mode == "stdio":
        # PTC_CANARY stands for ptc-engine's secrets: its downstream servers must not see it.
        env = {**os.environ, "PTC_CANARY": "secret"}
        return StdioServerParameters(command=args.rest[0], args=args.rest[1:], env=env)
    url, key = args.rest
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120))
    return streamable_http_client(url, http_client=http)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fs-root", required=True)
    parser.add_argument("--pause", action="store_true")
    parser.add_argument("mode", choices=["stdio", "http"])
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    server = connect(args)
    async with Client(server) as client:
        await scenarios(client, args.fs_root, args.pause, persistent=args.mode == "stdio")
    await with_sampling(connect(args))
    await with_approvals(connect(args))
    await abandoned(connect(args), args.pause)
    log("ALL OK")


asyncio.run(main())
