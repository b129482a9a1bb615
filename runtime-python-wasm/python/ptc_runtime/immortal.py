"""Which objects of the pre-initialisation snapshot the build makes immortal.

Every instance maps the snapshot copy-on-write, and CPython writes an object's reference count
each time it is used (`Py_INCREF`/`Py_DECREF`): a program that only imports `json` and calls a
function copies hundreds of the snapshot's pages. An immortal object's count is never written
(CPython 3.14 on 32-bit: a count of at least 2**30). So, at the very end of pre-initialisation,
`snapshot_objects()` lists every object the snapshot holds (everything the collector tracks, what
they refer to, the constants and names of code objects) and keeps them alive, and the build
(`build.rs`) rewrites their counts in the component's memory image to CPython's immortal value.

The addresses travel in the snapshot itself, as one bytes object between `MARKER` and `END`:
base64 of the ascending addresses' differences, each a LEB128 varint. base64 has no zero bytes,
so the text lies whole in one of the memory image's data segments.
"""

import base64
import gc
import sys
from types import CodeType

MARKER = b"<<PTC-IMMORTAL:"
END = b">>"


def _code_parts(code):
    # Code objects are not tracked by the collector, so `gc.get_referents` does not see what
    # they hold; these attributes return the stored objects (`co_code` would build a copy).
    return (code.co_consts, code.co_names, code.co_filename, code.co_name, code.co_qualname,
            code.co_linetable, code.co_exceptiontable, code.co_varnames, code.co_cellvars,
            code.co_freevars)


def snapshot_objects(roots=()):
    """Every object reachable from what the collector tracks (and from `roots`) that is not
    immortal already, and the encoded addresses. The caller keeps the list alive for good:
    an object freed before the snapshot must not be patched (its memory is the allocator's)."""
    is_immortal = getattr(sys, "_is_immortal", lambda o: False)
    seen = set()
    keep = []
    pending = gc.get_objects()
    pending.extend(roots)
    # The walk's own containers are not the snapshot's.
    seen.update((id(seen), id(keep), id(pending)))
    while pending:
        o = pending.pop()
        i = id(o)
        if i in seen:
            continue
        seen.add(i)
        if not is_immortal(o):
            keep.append(o)
        pending.extend(gc.get_referents(o))
        if type(o) is CodeType:
            pending.extend(_code_parts(o))
    del seen, pending
    return keep, encode(sorted(map(id, keep)))


def encode(addresses):
    out = bytearray()
    prev = 0
    for a in addresses:
        d = a - prev
        prev = a
        while d >= 0x80:
            out.append((d & 0x7F) | 0x80)
            d >>= 7
        out.append(d)
    return MARKER + base64.b64encode(bytes(out)) + END


def decode(blob):
    """The addresses `encode` wrote (the build does the same in Rust)."""
    assert blob.startswith(MARKER) and blob.endswith(END)
    raw = base64.b64decode(blob[len(MARKER):-len(END)])
    addresses, a, d, shift = [], 0, 0, 0
    for byte in raw:
        d |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            a += d
            addresses.append(a)
            d = shift = 0
    return addresses
