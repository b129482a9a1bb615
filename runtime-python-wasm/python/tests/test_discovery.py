"""Finding tools from inside a program (ptc_runtime.discovery), on the host's CPython, against
the 102 real MCP tools of runtime-python-wasm/toolsets."""

import contextlib
import io
import unittest

from helpers import ScriptedHost
from ptc_runtime import discovery, run_program
from ptc_runtime.stubs import parse_tools
from test_check import mcp_tools

SPECS = parse_tools(mcp_tools())


def first(query, limit=10):
    return [line.split("(")[0] for line in discovery.search(SPECS, query, limit).splitlines()]


class SearchTest(unittest.TestCase):
    def test_what_a_model_would_ask_finds_the_tool_first(self):
        asked = {
            "create an issue": "github.create_issue",
            "list pull requests": "github.list_pull_requests",
            "take a screenshot": "playwright.browser_take_screenshot",
            "move a file": "filesystem.move_file",
            "search notion pages": "notion.API_post_search",
            "fill a form": "playwright.browser_fill_form",
            "navigate to url": "playwright.browser_navigate",
        }
        for query, tool in asked.items():
            self.assertEqual(first(query)[0], tool, query)

    def test_each_tools_own_summary_finds_it_among_the_first_five(self):
        # The 102 tools' first sentences as queries: a check that the ranking uses names,
        # descriptions and rarity together (99 of 102 came first, 102 in the first five).
        missed = []
        for spec in SPECS:
            query = discovery._summary(spec.description) or spec.name
            if spec.qualified not in first(query, 5):
                missed.append((query, spec.qualified))
        self.assertEqual(missed, [])

    def test_a_line_is_the_compact_signature_and_first_sentence(self):
        line = discovery.search(SPECS, "create an issue", 1).splitlines()[0]
        self.assertTrue(line.startswith("github.create_issue(owner: str, repo: str, title: str, body?: str"), line)
        self.assertTrue(line.endswith("# Create a new issue in a GitHub repository"), line)

    def test_more_than_the_limit_says_how_to_see_them(self):
        lines = discovery.search(SPECS, "pull request", 2).splitlines()
        self.assertEqual(len(lines), 3)
        self.assertRegex(lines[2], r"^\(and \d+ more; search_tools\('pull request', limit=\d+\)\)$")

    def test_nothing_found_names_the_namespaces(self):
        self.assertEqual(discovery.search(SPECS, "xylophone", 5),
                         "no tool matches 'xylophone'; the namespaces are everything, filesystem, github, "
                         "notion, playwright (dir(namespace) lists one's tools)")
        self.assertIn("say what the tool should do", discovery.search(SPECS, "the", 5))


class DescribeTest(unittest.TestCase):
    def test_the_stub_has_every_parameter_and_its_documentation(self):
        text = discovery.describe(SPECS, ["github.create_issue"])
        self.assertIn("class github:", text)
        self.assertIn("async def create_issue(owner: str, repo: str, title: str, body: str = ...", text)
        self.assertIn('"""Create a new issue in a GitHub repository', text)

    def test_original_and_python_names_both_work_and_unknown_ones_get_a_suggestion(self):
        by_python = discovery.describe(SPECS, "notion.API_post_search")
        by_original = discovery.describe(SPECS, ["notion.API-post-search"])
        self.assertEqual(by_python, by_original)
        text = discovery.describe(SPECS, ["github.create_isue"])
        self.assertTrue(text.startswith("# no tool 'github.create_isue'; did you mean 'github.create_issue'?"), text)


class InAProgramTest(unittest.TestCase):
    def run_code(self, code, tools):
        host = ScriptedHost()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            outcome = run_program(code, tools, host)
        return outcome, out.getvalue(), host

    def test_a_program_searches_then_calls_what_it_found(self):
        code = ("found = search_tools('create an issue', limit=1)\n"
                "print(found)\n"
                "name = found.split('(')[0]\n"
                "space, tool = name.split('.')\n"
                "r = await getattr(globals()[space], tool)(owner='o', repo='r', title='t')\n"
                "print(r['tool'])")
        outcome, out, host = self.run_code(code, mcp_tools())
        self.assertTrue(outcome.ok, outcome)
        self.assertTrue(out.startswith("github.create_issue(owner: str"), out)
        self.assertTrue(out.endswith("create_issue\n"), out)
        self.assertEqual(host.rounds, [[("create_issue", {"owner": "o", "repo": "r", "title": "t"})]])

    def test_a_tool_named_search_tools_keeps_its_own_name_elsewhere(self):
        tools = [("search_tools", "Searches.", "{}"), ("ping", "", "{}")]
        outcome, out, _ = self.run_code("print(search_tools('ping'))\nprint(await search_tools_tool())", tools)
        self.assertTrue(outcome.ok, outcome)
        self.assertTrue(out.startswith("ping()"), out)


class HelpTest(unittest.TestCase):
    """`help` in a program, where Python's own cannot work (it needs `pydoc`)."""

    run_code = InAProgramTest.run_code

    def help_of(self, code, tools=None):
        outcome, out, _ = self.run_code(code, mcp_tools() if tools is None else tools)
        self.assertTrue(outcome.ok, outcome)
        return out

    def test_a_tool_shows_how_to_call_it_and_every_parameter(self):
        out = self.help_of("help(github.create_issue)")
        self.assertTrue(out.startswith("# await github.create_issue(...) returns the tool's result"), out)
        self.assertIn("async def create_issue(owner: str, repo: str, title: str, body: str = ...", out)
        self.assertEqual(out, self.help_of("help('github.create_issue')"), "its name says the same")

    def test_a_namespace_lists_its_tools_bounded(self):
        out = self.help_of("help(github)")
        lines = out.splitlines()
        self.assertTrue(lines[0].startswith("Tool namespace github: 26 tools"), lines[0])
        self.assertIn("  github.create_issue(owner: str, repo: str, title: str", out)
        many = [(f"t{i}", "", "{}", "big") for i in range(100)]
        lines = self.help_of("help(big)", many).splitlines()
        self.assertEqual(len(lines), 1 + 60 + 2, lines[-3:])
        self.assertIn("… and 40 more", lines[-2])

    def test_other_objects_show_signature_documentation_and_members_bounded(self):
        out = self.help_of("help(len)\nhelp(3)\nhelp(json)\nhelp()")
        self.assertIn("len(obj, /)\n\n    Return the number of items in a container.", out)
        self.assertIn("3 is an instance of int.\n\nclass int", out)
        self.assertIn("module json", out)
        self.assertIn("more lines: print(obj.__doc__) shows them", out, "json's docstring is cut")
        self.assertIn("    loads(s, *, cls=None", out)
        self.assertIn("help(obj) prints what obj is", out)

    def test_a_function_of_the_program_and_a_tool_named_help(self):
        code = "async def fetch(url, retries=2):\n    'Gets url.'\nhelp(fetch)\nprint(await help_tool())"
        out = self.help_of(code, [("help", "Helps.", "{}")])
        self.assertTrue(out.startswith("async fetch(url, retries=2)\n\n    Gets url.\n"), out)
        self.assertTrue(out.endswith("{'tool': 'help', 'args': {}}\n"), out)


if __name__ == "__main__":
    unittest.main()
