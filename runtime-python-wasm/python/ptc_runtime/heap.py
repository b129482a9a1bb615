"""The snapshot's free memory, filled before it is taken, so that a program's objects are laid
side by side in fresh pages instead of scattered over the snapshot's.

The component's CPython has no pymalloc: every object comes from wasi-libc's dlmalloc. When the
pre-initialisation ends, its freed objects leave free chunks all over the heap (5.4 MiB of
them), and dlmalloc serves small requests from those first. Every instance maps the snapshot
copy-on-write, so each object a program made landed on a page of its own and copied it: in a
fresh instance 2,000 `bytes(8)` touched 798 pages spread over 18 MiB, 500 small dicts 378
(native CPython: 25 and 39). With the chunks taken by objects kept for good (nothing touches
them again, so no instance copies their pages), the same allocations touch 19 and 74 pages.

What it bought (docs/benchmarks.md, "The snapshot's free chunks filled"): half the pages a
warm instance copies ahead, a fresh one-call program 25-35% faster, a hibernated execution's
image 27% smaller, 20 top-level tools' stubs in a fresh execution in 3.1-3.3 ms instead of
6.2-7.1. What it costs: a loop that makes and frees an object per step is about 2.5% slower
(a freed chunk next to the heap's top joins it, and the next request splits the top again).
Tried on 2026-11-24, before warm instances copied pages ahead, it was not kept for that cost.
"""

# Request sizes, largest first: a request splits a larger chunk when none of its own size is
# left, so small ones last take what the larger ones left over.
SIZES = (*range(4096, 512, -64), *range(512, 0, -8))

# Allocations in a row that come each right after the last: the chunks of that size are gone,
# and dlmalloc carves new memory (or one large chunk, which a program would also fill in order).
IN_A_ROW = 8

# At most this many bytes in all: the snapshot's filling holds 4.1 MiB (10,441 objects).
MOST_BYTES = 32 << 20


def fill(kept):
    """Takes the free chunks the heap has now with objects appended to `kept` (keep it)."""
    total = 0
    for size in SIZES:
        row = 0
        last = None
        while row < IN_A_ROW and total < MOST_BYTES:
            held = bytes(size)
            kept.append(held)
            total += size
            at = id(held)
            # Next to the last one: no more than a chunk's size past it (header and rounding).
            row = row + 1 if last is not None and 0 < at - last <= size + 64 else 0
            last = at
