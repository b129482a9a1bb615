"""The check of a program's tool calls before it runs (ptc_runtime.check), on the host's
CPython: each refusal with its words, and a corpus of valid programs, written against the real
MCP tool sets of runtime-python-wasm/toolsets, that must all pass."""

import ast
import glob
import json
import os
import statistics
import time
import unittest

from helpers import ScriptedHost
from ptc_runtime import run_program
from ptc_runtime.check import check_program
from ptc_runtime.stubs import parse_tools

HERE = os.path.dirname(__file__)
TOOLSETS = os.path.join(HERE, "..", "..", "toolsets")


def mcp_tools():
    """The 102 tools of the five MCP servers, one namespace each, as the MCP front end gives them."""
    defs = []
    for path in sorted(glob.glob(os.path.join(TOOLSETS, "*.json"))):
        space = os.path.splitext(os.path.basename(path))[0]
        with open(path) as f:
            tools = json.load(f)
        for t in tools:
            defs.append((t["name"], t.get("description", ""), json.dumps(t["inputSchema"]), space))
    return defs


WEATHER = [
    ("get_weather", "", json.dumps({
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "units": {"enum": ["c", "f"]}},
        "required": ["city"], "additionalProperties": False,
    })),
    ("search", "", json.dumps({"type": "object", "properties": {"q": {"type": "string"}}})),
]


def problems(code, tools=WEATHER, known=()):
    return [m for _, _, m in check_program(ast.parse(code), parse_tools(tools), known)]


class RefusalsTest(unittest.TestCase):
    def test_each_kind_of_mistake_is_named_with_the_signature(self):
        sig = 'get_weather(city: str, days?: int, units?: "c"|"f")'
        cases = {
            "await get_wether(city='Oslo')": f"get_wether is not defined; did you mean the tool {sig}?",
            "await get_weather(town='Oslo')": f"get_weather() takes no argument 'town': {sig}",
            "await get_weather(citi='Oslo')": f"get_weather() takes no argument 'citi' (did you mean 'city'?): {sig}",
            "await get_weather(days=3)": f"get_weather() is missing the required argument 'city': {sig}",
            "await get_weather('Oslo', 3, 'c', 4)": f"get_weather() takes at most 3 positional arguments (4 given): {sig}",
            "await get_weather(city='Oslo', days='3')": f"get_weather(days=...) takes an integer, not '3' (a string): {sig}",
            "await get_weather(city=['Oslo'])": f"get_weather(city=...) takes a string, not ['Oslo'] (a list): {sig}",
            "await get_weather('Oslo', city='Bergen')": f"get_weather() got 'city' twice: {sig}",
            "get_weather(city='Oslo')": "get_weather(city='Oslo') is not awaited, so it would never run: write "
                                        "`await get_weather(city='Oslo')`",
        }
        for code, said in cases.items():
            self.assertEqual(problems(code), [said], code)

    def test_a_namespace_says_what_it_has(self):
        found = problems("await github.create_isue(owner='a', repo='b', title='t')", mcp_tools())
        self.assertEqual(len(found), 1)
        self.assertTrue(found[0].startswith("github has no callable tool 'create_isue'; did you mean "
                                            "github.create_issue(owner: str, repo: str, title: str"), found)

    def test_an_awaited_name_that_is_no_tool_says_what_the_tools_are(self):
        self.assertEqual(problems("await web_search(q='x')"), [
            "web_search is not defined; no tool has that name: the program's tools are get_weather, search"])
        space = [("read_file", "", "", "fs")]
        self.assertEqual(problems("await read_file(path='x')", WEATHER + space), [
            "read_file is not defined; it is a tool in a namespace: call it as `await fs.read_file(...)`"])
        self.assertEqual(problems("await gitlab.create_issue(title='x')", WEATHER + space), [
            "gitlab is not defined; no tool namespace has that name: the program's tools are get_weather, search; "
            "its tool namespaces are fs (1 tool); print(search_tools('what the tool does')) finds a tool by what it does"])
        # Bounded however many tools there are: 10 names and 10 namespaces at most, then a search.
        many = [(f"tool_{i:03}", "", "") for i in range(300)] + [(f"t{i}", "", "", f"server_{i:02}") for i in range(25)]
        (said,) = problems("await web_search(q='x')", many)
        self.assertEqual(said, "web_search is not defined; no tool has that name: the program's tools are "
                               + ", ".join(f"tool_{i:03}" for i in range(10)) + ", … and 290 more; its tool namespaces are "
                               + ", ".join(f"server_{i:02} (1 tool)" for i in range(10)) + ", … and 15 more; "
                               "print(search_tools('what the tool does')) finds a tool by what it does")
        self.assertLess(len(said), 600)

    def test_an_unknown_name_passes_where_the_program_may_bind_it_unseen_or_does_not_await_it(self):
        for code in [
            "from asyncio import *\nawait sleep(0)",
            "exec('async def helper(): pass')\nawait helper()",
            "globals()['helper'] = get_weather\nawait helper(city='x')",
            "import builtins\nbuiltins.helper = get_weather\nawait helper(city='x')",
            "r = await asyncio.gather(helper())",
            "try:\n    await helper()\nexcept NameError:\n    pass",
            "async def helper():\n    pass\nawait helper()",
            "await anext(aiter(x))",
        ]:
            self.assertEqual(problems(code, known={"ToolError", "asyncio", "json"}), [], code)

    def test_a_refused_program_runs_nothing_and_says_where(self):
        host = ScriptedHost()
        code = "await search(q='a')\nawait get_weather(town='Oslo')"
        outcome = run_program(code, WEATHER, host)
        self.assertFalse(outcome.ok)
        self.assertTrue(outcome.message.startswith("ToolCheckError: the program was not run: its tool call cannot "
                                                   "work as written (nothing ran, so nothing needs undoing)"), outcome)
        self.assertIn("line 2: get_weather() takes no argument 'town'", outcome.message)
        self.assertIn('File "<code>", line 2', outcome.traceback)
        self.assertEqual(host.rounds, [], "the first call did not run either")


VALID = [
    # Dynamic calls, tools as values, getattr, comprehensions and gather.
    "r = await asyncio.gather(*[get_weather(city=c) for c in ['Oslo', 'Cairo']])",
    "f = get_weather\nawait f(city='Oslo', bogus=1)",
    "await getattr(github, 'search_repositories')(query='x')",
    "tools = [github.list_issues, github.get_issue]\nawait tools[0](owner='a', repo='b')",
    "kw = {'city': 'Oslo'}\nawait get_weather(**kw)",
    "args = ['Oslo']\nawait get_weather(*args)",
    "t = asyncio.create_task(get_weather(city='Oslo'))\nawait t",
    "coro = get_weather(city='Oslo')\nprint(await coro)",
    "await asyncio.wait_for(get_weather(city='Oslo'), 5)",
    "results = {c: await get_weather(city=c, days=d) for c, d in [('Oslo', 1)]}",
    # Names the program binds are its own.
    "def get_weather(**kw):\n    return kw\nget_weather(town='x')",
    "get_weather = print\nget_weather('not a tool')",
    "for github in [1]:\n    pass\ngithub.nothing()",
    "import json as github\ngithub.dumps({})",
    "async def main(search):\n    return await search(anything=1)\nawait main(search)",
    # Errors the program handles itself.
    "try:\n    await github.nope()\nexcept ToolError:\n    pass",
    "try:\n    await get_weather(town='x')\nexcept Exception as e:\n    print(e)",
    # Values it cannot know, or a schema it cannot read simply.
    "city = 'Oslo'\nawait get_weather(city=city, days=int('3'))",
    "await get_weather(city=f'{1}slo')",
    "await search(q=None if False else 'x')",
    "await get_weather(city='Oslo', units='k')",
    # Extra keywords a schema allows.
    "await search(q='x', page=2)",
    # Namespaced tools of the real servers, as models write them.
    "issues = await github.list_issues(owner='octo', repo='hello', state='open')\n"
    "titles = [i['title'] for i in issues]",
    "found = await github.search_repositories(query='language:rust', perPage=5, page=1)",
    "text = await filesystem.read_text_file(path='/tmp/a.txt', head=10)",
    "await filesystem.write_file(path='/tmp/b.txt', content='hi')\n"
    "print(await filesystem.list_directory(path='/tmp'))",
    "await playwright.browser_navigate(url='https://example.com')\n"
    "snap = await playwright.browser_snapshot()",
    "pages = await asyncio.gather(*(notion.API_post_search(query=q) for q in ['a', 'b']))",
    "print(await everything.echo(message='hi'))",
    "dir(github)\nhasattr(github, 'nope')",
    "help(github.create_issue)",
    # Text that only mentions tools.
    "print('get_weather(town=1)')",
    "# await get_wether(city='x')\npass",
]


class CorpusTest(unittest.TestCase):
    def test_valid_programs_pass(self):
        tools = WEATHER + mcp_tools()
        for code in VALID:
            self.assertEqual(problems(code, tools, known={"ToolError", "asyncio", "json"}), [], code)

    def test_names_a_live_session_defined_earlier_are_known(self):
        self.assertEqual(problems("await get_weathr_cached('x')", known={"get_weathr_cached"}), [])

    def test_what_the_check_costs(self):
        tools = WEATHER + mcp_tools()
        specs = parse_tools(tools)
        code = VALID[22] + "\n" + VALID[24] + "\n" + VALID[26]
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            check_program(ast.parse(code), specs, ())
            times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        print(f"\ncheck of a 6-line program against 105 tools: median {median * 1e6:.0f} us (host CPython)")
        self.assertLess(median, 0.05, "a check is a parse and a walk")


if __name__ == "__main__":
    unittest.main()
