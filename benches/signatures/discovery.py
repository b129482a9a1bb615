"""What a model reads before its first tool call, with every tool listed in `execute_code`'s
description against discovery mode (servers named, tools found with `search_tools`), through
the real `ptc-engine mcp` and the official MCP SDK's client. Run with `just discovery`.

Two tool sets: the 102 tools of the five captured servers (runtime-python-wasm/toolsets,
served as they are by toolset_server.py), and 510 tools (each server five times, under five
names). A scripted model does each task as a model would in each mode: listed, it calls the
tool at once (one round, having read the description); in discovery mode it first prints
`search_tools(task, limit=3)`, then calls the first tool found (two rounds, having read the
description and the search's output). Tokens are Claude's legacy tokenizer (tokens.py).
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

from mcp import Client, StdioServerParameters
from tokenizers import Tokenizer
import anthropic

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
TOOLSETS = os.path.join(ROOT, "runtime-python-wasm", "toolsets")
SETS = ["filesystem", "everything", "github", "playwright", "notion"]
TOKENIZER = Tokenizer.from_file(os.path.join(os.path.dirname(anthropic.__file__), "tokenizer.json"))

# (what the model wants, the tool that does it, the arguments it passes)
TASKS = [
    ("create an issue", "github.create_issue", {"owner": "o", "repo": "r", "title": "t"}),
    ("list pull requests", "github.list_pull_requests", {"owner": "o", "repo": "r"}),
    ("add a comment to an issue", "github.add_issue_comment", {"owner": "o", "repo": "r", "issue_number": 1, "body": "b"}),
    ("fork a repository", "github.fork_repository", {"owner": "o", "repo": "r"}),
    ("take a screenshot", "playwright.browser_take_screenshot", {"scale": "css"}),
    ("navigate to a url", "playwright.browser_navigate", {"url": "https://example.com"}),
    ("fill a form", "playwright.browser_fill_form", {"fields": []}),
    ("move a file", "filesystem.move_file", {"source": "a", "destination": "b"}),
    ("read a text file", "filesystem.read_text_file", {"path": "a"}),
    ("search notion pages", "notion.API_post_search", {"query": "q"}),
]


def tokens(text):
    return len(TOKENIZER.encode(text).ids)


def config(directory, copies):
    servers = {}
    for name in SETS:
        for i in range(copies):
            servers[name if i == 0 else f"{name}{i + 1}"] = {
                "command": sys.executable,
                "args": [os.path.join(HERE, "toolset_server.py"), os.path.join(TOOLSETS, f"{name}.json")],
                "allow": ["*"],
            }
    path = os.path.join(directory, f"servers-{copies}.json")
    with open(path, "w") as f:
        json.dump({"mcpServers": servers}, f)
    return path


def stdout_of(result):
    return (result.structured_content or {}).get("stdout", "")


async def measure(binary, path, above):
    params = StdioServerParameters(command=binary, args=["mcp", "--config", path, "--discovery-above", str(above), "--max-tools", "1024"])
    async with Client(params) as client:
        listed = await client.list_tools()
        tool = next(t for t in listed.tools if t.name == "execute_code")
        description = tool.description
        rounds, read, found, search_ms = [], [], 0, []
        for task, wanted, args in TASKS:
            spent = tokens(description)
            name = wanted
            steps = 1
            if above < 100_000:
                t = time.perf_counter()
                r = await client.call_tool("execute_code", {"code": f"print(search_tools({task!r}, limit=3))"})
                search_ms.append((time.perf_counter() - t) * 1000)
                shown = stdout_of(r)
                spent += tokens(shown)
                name = shown.split("(")[0]
                if "." not in name:
                    print(f"search_tools({task!r}) showed {shown!r} {r}", file=sys.stderr)
                    rounds.append(steps)
                    read.append(spent)
                    continue
                steps = 2
            space, tool_name = name.split(".")
            r = await client.call_tool("execute_code", {"code": f"print(json.dumps(await {space}.{tool_name}(**{args!r})))"})
            called = json.loads(stdout_of(r) or "{}").get("tool", "") if not r.is_error else ""
            # Any copy of the right server's tool is right.
            if f"{space.rstrip('0123456789')}.{called.replace('-', '_')}" == wanted:
                found += 1
            rounds.append(steps)
            read.append(spent)
        return {
            "tools": len(listed.tools),
            "description": tokens(description),
            "chars": len(description),
            "read_before_call": statistics.median(read),
            "rounds": statistics.median(rounds),
            "right_tool": f"{found}/{len(TASKS)}",
            "search_ms": round(statistics.median(search_ms), 2) if search_ms else None,
        }


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "ptc-engine"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        print(f"{'tools':>6} {'mode':<10} {'description tokens':>18} {'chars':>7} {'read before call':>16} "
              f"{'rounds':>6} {'right tool':>10} {'search ms':>9}")
        for copies, count in [(1, 102), (5, 510)]:
            path = config(directory, copies)
            for mode, above in [("listed", 1_000_000), ("discovery", 40)]:
                m = await measure(args.binary, path, above)
                print(f"{count:>6} {mode:<10} {m['description']:>18} {m['chars']:>7} {m['read_before_call']:>16} "
                      f"{m['rounds']:>6} {m['right_tool']:>10} {m['search_ms'] or '-':>9}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
