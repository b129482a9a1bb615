import contextlib
import io
import json
import unittest

from helpers import ScriptedHost
from ptc_runtime import run_program
from ptc_runtime.wire import plain_text

TOOLS = [("get-weather", "Weather.", {"type": "object", "properties": {"city": {"type": "string"}}}),
         ("add", "Adds.", {"type": "object", "properties": {"a": {}, "b": {}}})]


def add_or_echo(name, args):
    if name == "add":
        return args["a"] + args["b"]
    if args.get("city") == "Nowhere":
        raise RuntimeError("no such city")
    return {"city": args["city"], "temp": 20}


def run(code, host=None, tools=TOOLS):
    host = host or ScriptedHost(add_or_echo)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        outcome = run_program(code, tools, host)
    return outcome, out.getvalue(), err.getvalue(), host


class RunnerTest(unittest.TestCase):
    def test_top_level_await_and_return(self):
        o, out, _, host = run("w = await get_weather(city='SF')\nprint(w['temp'])\nreturn w")
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "20\n")
        self.assertEqual(json.loads(o.value_json), {"city": "SF", "temp": 20})
        self.assertEqual(host.rounds, [[("get-weather", {"city": "SF"})]])

    def test_gather_is_one_round(self):
        code = "r = await asyncio.gather(*[add(a=i, b=1) for i in range(100)])\nreturn sum(r)"
        o, _, _, host = run(code)
        self.assertEqual(json.loads(o.value_json), sum(range(100)) + 100)
        self.assertEqual(len(host.rounds), 1)
        self.assertEqual(len(host.rounds[0]), 100)

    def test_sequential_loop_is_one_round_per_call(self):
        o, _, _, host = run("t = 0\nfor i in range(5):\n    t = await add(a=t, b=i)\nreturn t")
        self.assertEqual(json.loads(o.value_json), 10)
        self.assertEqual(len(host.rounds), 5)

    def test_a_lone_call_is_answered_without_a_turn_of_the_loop(self):
        # With nothing else to run, a call asks the host from the program's own await: the
        # loop's selector never blocks for it (it only polls, at the task's start and end).
        from ptc_runtime.loop import _HostSelector
        waits, select = [], _HostSelector.select

        def counted(selector, timeout=None):
            waits.append(timeout)
            return select(selector, timeout)

        _HostSelector.select = counted
        try:
            o, _, _, host = run("t = 0\nfor i in range(5):\n    t = await add(a=t, b=i)\nreturn t")
        finally:
            _HostSelector.select = select
        self.assertEqual(json.loads(o.value_json), 10)
        self.assertEqual(len(host.rounds), 5)
        self.assertTrue(all(t == 0 for t in waits), waits)

    def test_a_call_with_other_work_pending_goes_through_the_loop(self):
        # A task ready to run, a timer set, or the task asked to cancel: the call waits on
        # the loop as before, so that the other work runs while the tool does.
        times = []
        host = ScriptedHost(add_or_echo)

        def timed(calls, timeout_ms):
            times.append(timeout_ms)
            return host(calls, timeout_ms)

        code = (
            "order = []\n"
            "async def later():\n"
            "    await asyncio.sleep(0.05)\n"
            "    order.append('timer')\n"
            "t = asyncio.create_task(later())\n"
            "await asyncio.sleep(0)\n"
            "x = await add(a=1, b=2)\n"
            "await t\n"
            "asyncio.current_task().cancel()\n"
            "try:\n"
            "    await add(a=x, b=1)\n"
            "except asyncio.CancelledError:\n"
            "    order.append('cancelled')\n"
            "return [x, order]"
        )
        o, _, _, _ = run(code, timed)
        self.assertEqual(json.loads(o.value_json), [3, ["timer", "cancelled"]], o)
        # The first call's wait was bounded by the timer.
        self.assertIsNotNone(times[0])
        self.assertLessEqual(times[0], 50)

    def test_results_are_read_as_json_whatever_their_spacing_and_bad_json_is_a_tool_error(self):
        answers = iter(['{"a": [1, 2.5, null]}', ' 7 ', '"x"\n', '1 2', '{"a": ', ''])

        def host(calls, timeout_ms):
            return [(cid, True, next(answers)) for cid, _, _, _ in calls]

        code = (
            "out = []\n"
            "for i in range(6):\n"
            "    try:\n"
            "        out.append(await add(a=i, b=0))\n"
            "    except ToolError as e:\n"
            "        out.append(str(e).split(':')[0])\n"
            "return out"
        )
        o, _, _, _ = run(code, host)
        bad = "tool 'add' returned invalid JSON"
        self.assertEqual(json.loads(o.value_json), [{"a": [1, 2.5, None]}, 7, "x", bad, bad, bad], o)

    def test_partial_results_resume_the_right_tasks(self):
        code = (
            "order = []\n"
            "async def one(i):\n"
            "    r = await add(a=i, b=0)\n"
            "    order.append(r)\n"
            "    return r\n"
            "res = await asyncio.gather(*(one(i) for i in range(4)))\n"
            "return [res, order]"
        )
        o, _, _, host = run(code, ScriptedHost(add_or_echo, per_round=1))
        self.assertEqual(json.loads(o.value_json), [[0, 1, 2, 3], [0, 1, 2, 3]])
        self.assertEqual([len(r) for r in host.rounds], [4, 0, 0, 0])

    def test_tool_error_is_catchable(self):
        code = (
            "try:\n    await get_weather(city='Nowhere')\n"
            "except ToolError as e:\n    print('caught', e.message, e.tool)\n"
        )
        o, out, _, _ = run(code)
        self.assertTrue(o.ok)
        self.assertEqual(out, "caught no such city get-weather\n")

    def test_uncaught_error_traceback_has_user_lines(self):
        o, _, err, _ = run("x = 1\n\ny = x / 0\n")
        self.assertFalse(o.ok)
        self.assertEqual(o.kind, "python-error")
        self.assertEqual(o.message, "ZeroDivisionError: division by zero")
        self.assertIn('File "<code>", line 3, in <module>', o.traceback)
        self.assertIn("y = x / 0", o.traceback)
        self.assertNotIn("runner.py", o.traceback)
        self.assertEqual(err, o.traceback)

    def test_error_inside_await_keeps_user_lines(self):
        o, _, _, _ = run("async def f():\n    raise ValueError('boom')\n\nawait f()\n")
        self.assertIn('line 4, in <module>', o.traceback)
        self.assertIn('line 2, in f', o.traceback)
        self.assertNotIn("base_events", o.traceback)

    def test_tool_error_traceback_hides_the_runtime(self):
        o, _, _, _ = run("x = 1\nawait get_weather(city='Nowhere')\n")
        self.assertEqual(o.message, "ToolError: no such city")
        self.assertIn('line 2, in <module>', o.traceback)
        self.assertNotIn("ptc_runtime", o.traceback)
        self.assertNotIn("stubs.py", o.traceback)

    def test_tool_error_is_a_runtime_error_as_monty_code_modes_raise(self):
        code = "try:\n    await get_weather(city='Nowhere')\nexcept RuntimeError as e:\n    print(type(e).__name__, e)\n"
        o, out, _, _ = run(code)
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "ToolError no such city\n")

    def test_the_headline_is_the_whole_message_without_notes(self):
        o, _, _, _ = run("e = ValueError('first line\\nsecond line')\ne.add_note('a hint')\nraise e")
        self.assertEqual(o.message, "ValueError: first line\nsecond line")
        self.assertIn("a hint", o.traceback)

    def test_a_return_value_keeps_its_shape_where_parts_have_no_json_form(self):
        o, _, _, _ = run("return [float('nan'), 1.5, {1: {2}, (3,): b'x'}, object]")
        self.assertEqual(json.loads(o.value_json), ["nan", 1.5, {"1": [2], "(3,)": "b'x'"}, "<class 'object'>"])

    def test_text_with_a_lone_surrogate_crosses_escaped_or_is_refused_in_words(self):
        o, _, _, host = run("try:\n    await get_weather(city='\\ud800')\nexcept TypeError as e:\n    print(e)\nreturn '\\udc00'")
        self.assertEqual(json.loads(o.value_json), "\udc00")
        self.assertEqual(host.rounds, [])
        o.value_json.encode("utf-8")
        o, _, _, _ = run("raise ValueError('\\ud800')")
        # The boundary (app.py) writes a message's lone surrogate as its escape.
        self.assertEqual(plain_text(o.message), "ValueError: \\ud800")

    def test_an_int_too_long_to_write_is_named(self):
        o, _, _, _ = run("return [10**5000, 1]")
        self.assertEqual(json.loads(o.value_json), ["<int of 16610 bits>", 1])

    def test_a_tool_call_returned_without_await_is_an_error_not_a_result(self):
        o, _, err, host = run("return add(a=1, b=2)")
        self.assertFalse(o.ok)
        self.assertEqual(o.message, "TypeError: the program's result is add(...) called without `await`, so it never ran: write `await add(...)`")
        self.assertEqual(host.rounds, [])
        self.assertNotIn("never awaited", err)

    def test_syntax_error(self):
        o, _, _, _ = run("x = (\n")
        self.assertEqual(o.kind, "python-error")
        self.assertIn("SyntaxError", o.message)

    def test_system_exit(self):
        self.assertTrue(run("import sys\nprint('a')\nsys.exit(0)\nprint('b')")[0].ok)
        o, out, _, _ = run("import sys\nsys.exit(3)")
        self.assertEqual((o.ok, o.kind, o.exit_code), (False, "exit", 3))
        self.assertEqual(run("raise SystemExit('bye')")[0].exit_code, 1)

    def test_keyboard_interrupt_and_base_exception_contained(self):
        o, _, _, _ = run("raise KeyboardInterrupt")
        self.assertEqual((o.ok, o.kind, o.message), (False, "python-error", "KeyboardInterrupt"))
        o, _, _, _ = run("class B(BaseException): pass\nasync def f():\n    raise B('x')\nawait f()")
        self.assertEqual(o.message, "B: x")

    def test_empty_and_comment_only(self):
        for code in ["", "   \n", "# nothing here\n# at all"]:
            o, out, err, _ = run(code)
            self.assertTrue(o.ok)
            self.assertEqual((out, err, o.value_json), ("", "", "null"))

    def test_sleep_create_task_wait_for(self):
        code = (
            "t = asyncio.create_task(add(a=1, b=2))\n"
            "await asyncio.sleep(0.01)\n"
            "try:\n"
            "    await asyncio.wait_for(asyncio.sleep(10), timeout=0.01)\n"
            "except asyncio.TimeoutError:\n"
            "    print('timed out')\n"
            "return await t\n"
        )
        o, out, _, _ = run(code)
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "timed out\n")
        self.assertEqual(o.value_json, "3")

    def test_asyncio_run_in_user_code_batches(self):
        code = (
            "async def main():\n"
            "    return await asyncio.gather(add(a=1, b=1), add(a=2, b=2))\n"
            "print(asyncio.run(main()))\n"
        )
        o, out, _, host = run(code)
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "[2, 4]\n")
        self.assertEqual(len(host.rounds), 1)

    def test_deadlock_is_an_error(self):
        o, _, _, _ = run("await asyncio.get_running_loop().create_future()")
        self.assertIn("every task is waiting", o.message)

    def test_globals_work_across_functions(self):
        o, out, _, _ = run("n = 0\ndef inc():\n    global n\n    n += 1\ninc(); inc()\nprint(n)")
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "2\n")

    def test_invalid_tools_rejected_before_running(self):
        o, out, _, _ = run("print('ran')", tools=[("a-b", "", ""), ("a b", "", "")])
        self.assertEqual((o.ok, o.kind, out), (False, "invalid-tools", ""))

    def test_namespaces_keep_servers_apart(self):
        tools = [("read", "", "", "fs"), ("read", "", "", "web-search"), ("open", "", "", "fs"), ("add", "", "")]
        code = (
            "r = await asyncio.gather(fs.read(p=1), web_search.read(q=2), fs.open(), add(a=1, b=2))\n"
            "return [r[0]['args'], r[1]['args'], r[2]['tool'], r[3]]"
        )
        host = ScriptedHost(lambda name, args: args["a"] + args["b"] if name == "add" else {"tool": name, "args": args})
        o, _, _, host = run(code, host, tools)
        self.assertTrue(o.ok, o)
        self.assertEqual(json.loads(o.value_json), [{"p": 1}, {"q": 2}, "open", 3])
        self.assertEqual(len(host.rounds), 1, "calls across namespaces are one batch")

    def test_unknown_and_misplaced_tools_say_what_exists(self):
        tools = [("read_file", "", "", "fs"), ("list_dir", "", "", "fs")]
        # Read before it runs: refused, with what the namespace has.
        o, _, err, host = run("await fs.delete_file(path='x')", tools=tools)
        self.assertEqual(o.message, "ToolCheckError: the program was not run: its tool call cannot work as written "
                                    "(nothing ran, so nothing needs undoing); fix and run it again:\n"
                                    "  line 1: fs has no callable tool 'delete_file'; its callable tools are: list_dir, "
                                    "read_file")
        self.assertIn("line 1", err)
        self.assertEqual(host.rounds, [])
        # Reached some other way, at run time.
        o, _, err, _ = run("await getattr(fs, 'delete_file')(path='x')", tools=tools)
        self.assertEqual(o.message, "UnknownToolError: fs has no callable tool 'delete_file'; "
                                    "its callable tools are: list_dir, read_file")
        o, _, _, host = run("await read_file(path='x')", tools=tools)
        self.assertEqual(o.message, "ToolCheckError: the program was not run: its tool call cannot work as written "
                                    "(nothing ran, so nothing needs undoing); fix and run it again:\n"
                                    "  line 1: read_file is not defined; it is a tool in a namespace: "
                                    "call it as `await fs.read_file(...)`")
        self.assertEqual(host.rounds, [])
        o, _, _, _ = run("await asyncio.gather(read_file(path='x'))", tools=tools)
        self.assertEqual(o.message, "NameError: name 'read_file' is not defined; it is a tool in a namespace: "
                                    "call it as `await fs.read_file(...)`")
        o, _, _, _ = run("fs.read_file = print", tools=tools)
        self.assertIn("cannot be replaced", o.message)
        o, _, _, _ = run("return [hasattr(fs, 'nope'), sorted(dir(fs))]", tools=tools)
        self.assertEqual(json.loads(o.value_json), [False, ["list_dir", "read_file"]])
        code = "try:\n    await fs.nope()\nexcept ToolError as e:\n    return [type(e).__name__, e.tool]"
        o, _, _, _ = run(code, tools=tools)
        self.assertEqual(json.loads(o.value_json), ["UnknownToolError", "nope"], "a ToolError too")

    def test_a_name_that_is_no_tool_says_what_the_tools_are_when_the_program_calls_it(self):
        tools = [("get_weather", "", ""), ("search", "", ""), ("read_file", "", "", "fs")]
        said = ("the program's tools are get_weather, search; its tool namespaces are fs (1 tool); "
                "print(search_tools('what the tool does')) finds a tool by what it does")
        # Not awaited where it is called, so the pre-run check lets it through; it fails when reached.
        o, out, _, host = run("print('ran')\nr = await asyncio.gather(web_search(q='x'))", tools=tools)
        self.assertEqual(o.message, f"NameError: name 'web_search' is not defined; no tool has that name either: {said}")
        self.assertEqual(out, "ran\n")
        o, _, _, _ = run("try:\n    await gitlab.create_issue(title='x')\nexcept ToolError:\n    pass", tools=tools)
        self.assertEqual(o.message, f"NameError: name 'gitlab' is not defined; no tool has that name either: {said}")
        # A misspelt variable is no tool call: Python's own message, without the list.
        o, _, _, _ = run("result = 1\nprint(reslt + 1)", tools=tools)
        self.assertTrue(o.message.startswith("NameError: name 'reslt' is not defined"), o.message)
        self.assertNotIn("tools", o.message)
        # Without tools, nothing to list.
        o, _, _, _ = run("await web_search(q='x')", tools=[])
        self.assertEqual(o.message, "NameError: name 'web_search' is not defined")

    def test_a_fresh_run_makes_stubs_only_for_the_tools_it_names(self):
        from unittest import mock

        from ptc_runtime import stubs

        made = []
        real = stubs.make_stub

        def counting(spec, call_tool):
            made.append(spec.python_name)
            return real(spec, call_tool)

        cases = [
            ("pass", [], None),
            ("return await add(a=1, b=2)", ["add"], 3),
            # Named in a function the program calls, or only in text: made.
            ("async def g():\n    return await add(a=1, b=1)\nreturn await g()", ["add"], 2),
            ("return 'add'", ["add"], "add"),
            # Reached without its name being written whole: every stub is made.
            ("return await globals()['a' + 'dd'](a=2, b=2)", ["get_weather", "add"], 4),
            ("f = eval('a' + 'dd')\nreturn await f(a=3, b=2)", ["get_weather", "add"], 5),
            ("return sorted(n for n in dir() if not n.startswith('_'))[:2]", ["get_weather", "add"], ["ToolError", "add"]),
        ]
        with mock.patch.object(stubs, "make_stub", counting):
            for code, names, value in cases:
                made.clear()
                o, _, _, _ = run(code)
                self.assertTrue(o.ok, (code, o))
                self.assertEqual(made, names, code)
                self.assertEqual(json.loads(o.value_json), value, code)
        # A misspelt tool is refused before it runs, as before: the check reads the specs.
        o, _, _, _ = run("return await ad(a=1, b=2)")
        self.assertIn("ad is not defined; did you mean the tool add(", o.message)

    def test_namespaced_stubs_are_made_when_first_reached(self):
        schema = '{"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}'
        tools = [("read_file", "Reads a file.", schema, "fs"), ("broken", "", "{not json", "fs")]
        code = (
            "before = sorted(vars(fs))\n"
            "a, b = fs.read_file, fs.read_file\n"
            "r = await a('x')\n"
            "return [before, sorted(k for k in vars(fs) if not k.startswith('_')), a is b, r['args'],\n"
            "        str(inspect.signature(a)), a.__doc__.splitlines()[0], a.__qualname__]"
        )
        host = ScriptedHost(lambda name, args: {"tool": name, "args": args})
        o, _, _, _ = run("import inspect\n" + code, host, tools)
        self.assertTrue(o.ok, o)
        self.assertEqual(json.loads(o.value_json), [
            ["_ToolNamespace__call", "_ToolNamespace__name", "_ToolNamespace__specs"], ["read_file"], True,
            {"path": "x"}, "(path, **kwargs)", "Reads a file.", "fs.read_file",
        ])
        # A schema that is not JSON (the host refuses one before it gets here) is refused when
        # its tool is reached, in words, and the others still work.
        o, _, _, _ = run("await fs.broken()", tools=tools)
        self.assertIn("InvalidTools: parameters of tool 'broken' are not valid JSON: Expecting property name", o.message)
        o, _, _, _ = run("del fs.read_file", tools=tools)
        self.assertIn("cannot be removed", o.message)

    def test_a_namespace_cannot_collide_with_a_tool(self):
        o, _, _, _ = run("pass", tools=[("fs", "", ""), ("read", "", "", "fs")])
        self.assertEqual((o.ok, o.kind), (False, "invalid-tools"))
        self.assertIn("namespace 'fs' and tool 'fs'", o.message)

    def test_unserialisable_arguments(self):
        o, _, _, _ = run("await add(a=object(), b=1)")
        self.assertIn("JSON-serialisable", o.message)
        # A failed encoding leaves nothing behind: the same list, once it is no longer a
        # cycle, goes over.
        code = (
            "x = [1]\nx.append(x)\nout = []\n"
            "for bad in (x, float('nan')):\n"
            "    try:\n        await add(a=bad, b=1)\n"
            "    except TypeError as e:\n        out.append(str(e))\n"
            "x.pop()\nreturn [out, await add(a=[x, x], b=[1.5, 'é'])]"
        )
        o, _, _, _ = run(code)
        (circular, nan), value = json.loads(o.value_json)
        self.assertIn("Circular reference detected", circular)
        self.assertIn("Out of range float values", nan)
        self.assertEqual(value, [[1], [1], 1.5, "é"])

    def test_return_inside_function_is_untouched(self):
        o, _, _, _ = run("def f():\n    return 5\nreturn f() + 1")
        self.assertEqual(o.value_json, "6")

    def test_a_return_inside_any_compound_statement_returns_from_the_program(self):
        body = {
            "if": "if x:\n    return 1\nelse:\n    return 2",
            "else": "if not x:\n    pass\nelif x > 5:\n    pass\nelse:\n    return 3",
            "for": "for i in range(3):\n    if i == 2:\n        return i",
            "for-else": "for i in range(3):\n    pass\nelse:\n    return 'else'",
            "while": "while True:\n    return 'w'",
            "try": "try:\n    1 / 0\nexcept ZeroDivisionError:\n    return 'caught'",
            "try-else": "try:\n    pass\nexcept Exception:\n    pass\nelse:\n    return 'else'",
            "finally": "try:\n    pass\nfinally:\n    return 'finally'",
            "with": "import contextlib\nwith contextlib.nullcontext():\n    return 'with'",
            "async with": "import contextlib\nasync with contextlib.AsyncExitStack():\n    return 'async with'",
            "match": "match x:\n    case 4:\n        return 'four'\n    case _:\n        return 'other'",
            "bare": "if x:\n    return",
            "class": "class C:\n    def m(self):\n        return 1\nreturn C().m() + 1",
            "await": "if x:\n    return await add(a=x, b=1)",
        }
        expected = {"if": "1", "else": "3", "for": "2", "for-else": '"else"', "while": '"w"',
                    "try": '"caught"', "try-else": '"else"', "finally": '"finally"', "with": '"with"',
                    "async with": '"async with"', "match": '"four"', "bare": "null", "class": "2", "await": "5"}
        for name, code in body.items():
            o, _, err, _ = run("x = 4\n" + code + "\nreturn 'after'")
            self.assertEqual((name, o.ok, o.value_json), (name, True, expected[name]), err)
        # A syntax error's line is still the program's own.
        o, _, _, _ = run("x = 1\nif x:\n    return (\n")
        self.assertEqual(o.kind, "python-error")
        self.assertIn("line 3", o.message + o.traceback)


class PreparedSessionTest(unittest.TestCase):
    """`prepare()` runs a warm-up program and builds the next run's loop ahead of time (in the
    component: during pre-initialisation). The run that uses it must start clean."""

    def test_prepared_run_starts_clean(self):
        from ptc_runtime import prepare
        prepare()
        code = "print('r' in globals())\nreturn await add(a=1, b=2)"
        o, out, _, host = run(code)
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "False\n")
        self.assertEqual(json.loads(o.value_json), 3)
        self.assertEqual(host.rounds, [[("add", {"a": 1, "b": 2})]])
        # The next run builds its own session.
        o, out, _, _ = run("print(await add(a=2, b=2))")
        self.assertEqual(out, "4\n")

    def test_a_live_session_after_prepare_starts_empty(self):
        """The warm-up also runs in a live session (to warm that path), which is then dropped."""
        import linecache
        from ptc_runtime import prepare, runner
        prepare()
        self.assertFalse([n for n in linecache.cache if str(n).startswith("<code #")])
        live = runner.live_session()
        self.assertEqual((live.cells, live.state_names()), (0, list(runner.INJECTED)))
        runner._forget_live_session()


if __name__ == "__main__":
    unittest.main()
