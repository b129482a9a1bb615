import unittest

from helpers import ScriptedHost  # noqa: F401  (sets sys.path)
from ptc_runtime import immortal


def _snapshot_shaped():
    # A tracked container holding an untracked object, and a function whose code holds a
    # constant that nothing tracked refers to.
    holder = {"key": "a string only this dict holds " + str(id(object()))}

    def uses_a_constant():
        return "a constant only a code object holds"

    return holder, uses_a_constant


class ImmortalTest(unittest.TestCase):
    def test_addresses_round_trip_with_no_zero_bytes(self):
        addresses = [16, 17, 300, 70_000, 70_016, 2**31 + 5]
        blob = immortal.encode(addresses)
        self.assertNotIn(0, blob)
        self.assertEqual(immortal.decode(blob), addresses)

    def test_lists_what_the_snapshot_holds_but_not_the_walk_itself(self):
        holder, fn = _snapshot_shaped()
        roots = [holder, fn]
        objects, blob = immortal.snapshot_objects(roots)
        addresses = set(immortal.decode(blob))
        self.assertEqual(addresses, {id(o) for o in objects})
        self.assertEqual(len(addresses), len(objects), "each object once")
        constant = next(c for c in fn.__code__.co_consts if isinstance(c, str))
        for o in (holder, holder["key"], fn, fn.__code__, constant, roots):
            self.assertIn(id(o), addresses, repr(o)[:60])
        # The walk's own containers are not the snapshot's.
        self.assertNotIn(id(objects), addresses)

    def test_already_immortal_objects_are_left_alone(self):
        import sys
        if not hasattr(sys, "_is_immortal"):
            self.skipTest("this CPython has no sys._is_immortal (3.14+)")
        objects, _ = immortal.snapshot_objects([None, True])
        self.assertFalse(any(o is None or o is True for o in objects))


if __name__ == "__main__":
    unittest.main()
