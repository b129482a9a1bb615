"""A program asked off the stack (the host answers `HIBERNATE`) unwinds out of the run, keeps
its tasks in memory, and goes on with `resume_program` exactly where it was."""

import contextlib
import io
import json
import time
import unittest

from helpers import ScriptedHost
from ptc_runtime import HIBERNATE, resume_program, run_program

# A timer of the program's own, due 10 ms in.
LATER = "async def later():\n    await asyncio.sleep(0.01)\n    return 'slept'\nt = asyncio.ensure_future(later())\n"

TOOLS = [("add", "Adds.", {"type": "object", "properties": {"a": {}, "b": {}}})]


def add(name, args):
    if args.get("a") == "boom":
        raise RuntimeError("the tool failed")
    return args["a"] + args["b"]


class HibernatingHost(ScriptedHost):
    """Answers `HIBERNATE` at the waits numbered in `at` (1-based), after taking their calls
    as the real host does: they were handed out, and are answered after the resume."""

    def __init__(self, at, per_round=None):
        super().__init__(add, per_round)
        self.at = set(at)
        self.waits = 0

    def __call__(self, calls, timeout_ms):
        self.waits += 1
        if self.waits in self.at:
            self.rounds.append([(n, json.loads(a)) for _, n, a, _ in calls])
            self.pending.extend(calls)
            return HIBERNATE
        return super().__call__(calls, timeout_ms)


def quietly(step):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        outcome = step()
    return outcome, out.getvalue(), err.getvalue()


class HibernateTest(unittest.TestCase):
    def test_a_gather_half_answered_goes_on_after_resume(self):
        host = HibernatingHost(at=[2], per_round=1)
        code = (
            "import random, time\n"
            "seed = random.random()\n"
            "r = await asyncio.gather(add(a=1, b=1), add(a=2, b=2), add(a=3, b=3))\n"
            "print('after', r)\n"
            "return [r, seed == seed]"
        )
        o, out, _ = quietly(lambda: run_program(code, TOOLS, host))
        self.assertEqual(o.kind, "hibernated", o)
        self.assertEqual(out, "")
        o, out, _ = quietly(lambda: resume_program(host))
        self.assertTrue(o.ok, o)
        self.assertEqual(json.loads(o.value_json), [[2, 4, 6], True])
        self.assertEqual(out, "after [2, 4, 6]\n")
        # The three calls went out once, in the first wait; none was sent again.
        self.assertEqual([len(r) for r in host.rounds], [3, 0, 0, 0])

    def test_pending_timers_and_a_second_hibernation(self):
        host = HibernatingHost(at=[1, 2])
        code = LATER + "x = await add(a=1, b=2)\ny = await add(a=x, b=3)\nreturn [x, y, await t]"
        o, _, _ = quietly(lambda: run_program(code, TOOLS, host))
        self.assertEqual(o.kind, "hibernated", o)
        o, _, _ = quietly(lambda: resume_program(host))
        self.assertEqual(o.kind, "hibernated", o)
        o, _, _ = quietly(lambda: resume_program(host))
        self.assertTrue(o.ok, o)
        self.assertEqual(json.loads(o.value_json), [3, 6, "slept"])

    def test_errors_and_exits_after_resume_end_the_run_as_before(self):
        host = HibernatingHost(at=[1])
        o, _, _ = quietly(lambda: run_program("x = await add(a='boom', b=1)", TOOLS, host))
        self.assertEqual(o.kind, "hibernated")
        o, _, err = quietly(lambda: resume_program(host))
        self.assertEqual(o.kind, "python-error", o)
        self.assertIn("ToolError: the tool failed", o.message)
        self.assertIn('File "<code>", line 1', err)

        host = HibernatingHost(at=[1])
        o, _, _ = quietly(lambda: run_program("import sys\nawait add(a=1, b=1)\nsys.exit(3)", TOOLS, host))
        o, _, _ = quietly(lambda: resume_program(host))
        self.assertEqual((o.kind, o.exit_code), ("exit", 3))

    def test_a_program_driving_its_own_loop_is_not_unwound(self):
        # asyncio.run() in a synchronous program runs a loop inside the program's own frame:
        # the runtime asks the host again instead of unwinding it.
        host = HibernatingHost(at=[1])
        code = "async def main():\n    return await add(a=2, b=3)\nprint(asyncio.run(main()))"
        o, out, _ = quietly(lambda: run_program(code, TOOLS, host))
        self.assertTrue(o.ok, o)
        self.assertEqual(out, "5\n")
        self.assertEqual(host.waits, 2)

    def test_a_session_keeps_its_globals_across_a_hibernation(self):
        host = HibernatingHost(at=[1])
        o, _, _ = quietly(lambda: run_program("n = await add(a=20, b=1)", TOOLS, host, True))
        self.assertEqual(o.kind, "hibernated")
        o, _, _ = quietly(lambda: resume_program(host))
        self.assertTrue(o.ok, o)
        o, out, _ = quietly(lambda: run_program("print(n * 2)", TOOLS, ScriptedHost(add), True))
        self.assertEqual(out, "42\n")

    def test_resume_without_a_hibernated_program_says_so(self):
        o = resume_program(ScriptedHost(add))
        self.assertEqual(o.kind, "internal")
        self.assertIn("no program", o.message)

    def test_the_first_wait_after_a_resume_goes_to_the_host_even_with_a_timer_due(self):
        host = HibernatingHost(at=[1])
        code = LATER + "x = await add(a=1, b=2)\nreturn [x, await t]"
        o, _, _ = quietly(lambda: run_program(code, TOOLS, host))
        self.assertEqual(o.kind, "hibernated", o)
        time.sleep(0.02)  # the timer is due when it resumes
        waits = []

        def recording(calls, timeout_ms):
            waits.append((len(calls), timeout_ms))
            return host(calls, timeout_ms)

        o, _, _ = quietly(lambda: resume_program(recording))
        self.assertTrue(o.ok, o)
        self.assertEqual(json.loads(o.value_json), [3, "slept"])
        # It asked the host at once, with no new call and a timeout of 0 (its timer is due),
        # as the wait that unwound would have ended; the timer ran after that.
        self.assertEqual(waits[0], (0, 0))


if __name__ == "__main__":
    unittest.main()

