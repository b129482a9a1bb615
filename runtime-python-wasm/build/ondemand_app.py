"""A build step of `build.rs`, run by componentize-py as a pre-initialisation of its own:
compiles the packages programs import on demand with the sandbox's CPython and writes them,
packed, beside the packages (`ptc_runtime/ondemand_collect.py`). Its component is thrown away,
and with it the memory compiling touched.

It loads what the sandbox's snapshot loads first, so that a standard-library module the
snapshot has is not compiled again; the snapshot loads more besides, never less.
"""

import os
import sys

from ptc_runtime import net, netclients, ondemand, ondemand_collect, stdlib

stdlib.preload()
net.install(lambda *request: None)
_collected = ondemand_collect.site(sys.path, extra=netclients.STDLIB_EXTRA)
_dir = next(e for e in sys.path if os.path.isfile(os.path.join(e, ondemand.MARKER)))
ondemand_collect.save(_collected, os.path.join(_dir, ondemand.BLOB))
