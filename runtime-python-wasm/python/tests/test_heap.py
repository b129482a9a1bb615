"""The snapshot's free chunks taken before it is sealed (ptc_runtime.heap), on the host's
CPython (whose pymalloc lays objects side by side already: the fill stops at once there)."""

import unittest
from unittest import mock

from ptc_runtime import heap


class FillTest(unittest.TestCase):
    def test_it_stops_once_each_size_comes_in_a_row(self):
        kept = []
        heap.fill(kept)
        self.assertGreaterEqual(len(kept), len(heap.SIZES) * heap.IN_A_ROW)
        self.assertLess(len(kept), 100 * len(heap.SIZES), "pymalloc's blocks come in a row at once")
        self.assertEqual({len(b) for b in kept}, set(heap.SIZES))

    def test_it_stops_at_its_bound_when_nothing_comes_in_a_row(self):
        addresses = iter(range(10**9, 0, -10**5))  # every allocation far below the last
        kept = []
        with mock.patch.object(heap, "MOST_BYTES", 1 << 20), mock.patch("builtins.id", lambda o: next(addresses)):
            heap.fill(kept)
        self.assertLessEqual(sum(len(b) for b in kept), (1 << 20) + max(heap.SIZES))


if __name__ == "__main__":
    unittest.main()
