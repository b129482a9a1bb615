import contextlib
import io
import json
import unittest

from helpers import ScriptedHost
from ptc_runtime import run_program
from ptc_runtime import runner
from ptc_runtime.runner import INJECTED
from ptc_runtime import session
from ptc_runtime.session import Live, SnapshotTooLarge

TOOLS = [("add", "Adds.", {"type": "object", "properties": {"a": {}, "b": {}}})]
OTHER = [("mul", "Multiplies.", {"type": "object", "properties": {"a": {}, "b": {}}})]


def arith(name, args):
    return args["a"] + args["b"] if name == "add" else args["a"] * args["b"]


class SessionTest(unittest.TestCase):
    def setUp(self):
        runner._live = None  # a fresh instance

    def run_in(self, code, tools=TOOLS):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            outcome = run_program(code, tools, ScriptedHost(arith), persist=True)
        return outcome, out.getvalue(), err.getvalue()

    def test_globals_imports_functions_and_classes_persist(self):
        o, _, _ = self.run_in(
            "import statistics as st\nrows = [1, 2, 3]\n"
            "def double(x):\n    return 2 * x\n"
            "class Box:\n    def __init__(self, v):\n        self.v = v\n"
            "b = Box(await add(a=1, b=1))")
        self.assertTrue(o.ok, o)
        o, out, _ = self.run_in("print(st.mean(rows), double(b.v), type(b).__name__)\nreturn len(rows)")
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "2 4 Box\n")
        self.assertEqual(o.value_json, "3")

    def test_tools_are_rebound_per_run_and_old_ones_removed(self):
        self.run_in("keep = add\nx = 1")
        o, out, _ = self.run_in("print(await mul(a=2, b=3))\nprint('add' in globals())", tools=OTHER)
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "6\nFalse\n")
        # A stub kept from an earlier run goes through this run's broker (the host decides).
        o, out, _ = self.run_in("print(await keep(a=1, b=2))")
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "3\n")

    def test_tools_not_sent_again_are_the_previous_programs(self):
        # The host sends None while a session's tools stay the same.
        o, _, _ = self.run_in("return await add(a=1, b=2)")
        self.assertTrue(o.ok, o)
        o, _, _ = self.run_in("return await add(a=2, b=2)", tools=None)
        self.assertTrue(o.ok and json.loads(o.value_json) == 4, o)
        o, _, _ = self.run_in("return await mul(a=2, b=3)", tools=OTHER)
        self.assertTrue(o.ok and json.loads(o.value_json) == 6, o)
        o, _, _ = self.run_in("return await mul(a=3, b=3)", tools=None)
        self.assertTrue(o.ok and json.loads(o.value_json) == 9, o)

    def test_invalid_tools_not_sent_again_fail_again(self):
        bad = [("add", "", {}), ("add", "", {})]
        o, _, _ = self.run_in("pass", tools=bad)
        self.assertEqual(o.kind, "invalid-tools", o)
        again, _, _ = self.run_in("pass", tools=None)
        self.assertEqual((again.kind, again.message), (o.kind, o.message))

    def test_no_tools_ever_sent_is_refused_in_words(self):
        o, _, _ = self.run_in("pass", tools=None)
        self.assertEqual(o.kind, "invalid-tools", o)
        self.assertIn("no tools were given", o.message)
        fresh = run_program("pass", None, ScriptedHost(arith))
        self.assertEqual(fresh.kind, "invalid-tools", fresh)

    def test_a_failed_run_keeps_what_it_defined_before_the_error(self):
        o, _, err = self.run_in("a = 1\nraise ValueError('boom')")
        self.assertFalse(o.ok)
        self.assertIn('File "<code #1>", line 2', err)
        o, out, _ = self.run_in("print(a)")
        self.assertEqual(out, "1\n")

    def test_tracebacks_show_the_cell_a_function_came_from(self):
        self.run_in("def f():\n    return 1 / 0")
        o, _, err = self.run_in("f()")
        self.assertFalse(o.ok)
        self.assertIn('File "<code #2>", line 1', err)
        self.assertIn('File "<code #1>", line 2, in f', err)
        self.assertIn("return 1 / 0", err)

    def test_snapshot_and_restore_rebuild_the_state(self):
        self.run_in(
            "import json as j\nimport math\n"
            "def area(r):\n    return math.pi * r * r\n"
            "class P:\n    def __init__(self, x):\n        self.x = x\n"
            "pts = [P(1), P(2)]\nshared = [1]\npair = (shared, shared)\n"
            "import dataclasses\n@dataclasses.dataclass\nclass D:\n    n: int = 3\nd = D()\n"
            "gen = (i for i in range(3))\nlam = lambda: 1\nalias = area")
        blob, kept, modules, dropped = runner.live_session().snapshot(1 << 20, INJECTED)
        reasons = dict(dropped)
        self.assertEqual(set(reasons), {"gen", "lam"})
        self.assertIn("cannot be pickled", reasons["gen"])
        self.assertIn("again", reasons["lam"])
        self.assertEqual(set(modules), {"json", "math", "dataclasses"})
        for name in ("j", "math", "area", "P", "pts", "pair", "alias"):
            self.assertIn(name, kept)
        self.assertNotIn("asyncio", kept)

        runner._live = None  # another instance
        kept2, dropped2 = runner.live_session().restore(blob)
        self.assertEqual(dropped2, [])
        self.assertEqual(set(kept2), set(kept))
        o, out, _ = self.run_in(
            "print(round(area(1), 2), [p.x for p in pts], pair[0] is pair[1], alias is area, j.dumps(1), d)")
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "3.14 [1, 2] True True 1 D(n=3)\n")
        # A restored session snapshots again (the restored sources are in linecache).
        _, kept3, _, dropped3 = runner.live_session().snapshot(1 << 20, INJECTED)
        self.assertEqual(dropped3, [])
        self.assertIn("area", kept3)

    def test_snapshot_over_the_limit_says_what_to_do(self):
        self.run_in("big = 'x' * 100000\nsmall = [1, 2]")
        with self.assertRaises(SnapshotTooLarge) as e:
            runner.live_session().snapshot(1000, INJECTED)
        message = str(e.exception)
        self.assertIn("more than 1000 bytes", message)
        self.assertIn("big (", message)
        self.assertIn("delete large globals", message)

    def test_a_state_too_large_is_never_pickled_whole(self):
        # Two globals that fit one by one but not together: refused while pickling them.
        self.run_in("a = b'x' * 600\nb = b'y' * 600")
        written = []
        real = session._Sink.write

        def counting(sink, data):
            written.append(memoryview(data).nbytes)
            return real(sink, data)

        session._Sink.write = counting
        try:
            with self.assertRaises(SnapshotTooLarge):
                runner.live_session().snapshot(1000, INJECTED)
        finally:
            session._Sink.write = real
        self.assertLess(sum(written), 4 * 1000, "every sink stops at the limit")

    def test_running_out_of_memory_while_pickling_keeps_the_session(self):
        self.run_in("keep = 41")
        real = session._pickled

        def starved(value, limit):
            raise MemoryError

        session._pickled = starved
        try:
            with self.assertRaises(SnapshotTooLarge) as e:
                runner.live_session().snapshot(1 << 20, INJECTED)
        finally:
            session._pickled = real
        self.assertIn("not enough memory left", str(e.exception))
        _, out, _ = self.run_in("print(keep + 1)")
        self.assertEqual(out, "42\n")

    def test_restore_refuses_garbage(self):
        with self.assertRaises(ValueError):
            Live(__builtins__, {}).restore(b"not a pickle")

    def test_fresh_runs_do_not_touch_the_session(self):
        self.run_in("x = 1")
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            o = run_program("print('x' in globals())", TOOLS, ScriptedHost(arith))
        self.assertEqual(out.getvalue(), "False\n")


if __name__ == "__main__":
    unittest.main()
