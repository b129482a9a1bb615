"""Packages a program imports on demand (`requests`, `httpx`), in a runtime with no files at
run time.

componentize-py's snapshot holds only what was imported during pre-initialisation: no
package file is there when a program runs. Importing `requests` and `httpx` at
pre-initialisation would put them in every instance, used or not. So their modules, and the
standard-library modules they need that the snapshot lacks, are compiled ahead
(`ondemand_collect.py`) and kept marshalled and compressed in one bytes object in the snapshot
(`load`); `Finder` runs a module's code at a program's first `import` of it.

`HOOKS` run after a named module has run, whoever loaded it: `netclients` fits the packages
to the host's fetch there.
"""

import importlib.machinery
import marshal
import os
import re
import sys
import zlib

MARKER = "ptc-on-demand.txt"
"""Beside the packages the build unpacked (`build/wheels.rs`): their top-level names."""

SITE = "/site-packages"
"""Where the packages' modules say they are (`__file__`, tracebacks); nothing is there."""

BLOB = "ptc-on-demand.bin"
"""The compiled modules' file, on the path at pre-initialisation (`ondemand_collect.save`)."""

HOOKS = {}
"""Module name -> function called with the module once it has run (`netclients` fills it)."""

QUIET = {}
"""Module name -> the start of a warning's message not shown while the module runs."""


class Finder:
    """A meta-path finder and loader over compiled modules: `index` maps a name to
    `(is_package, origin, offset, length)` of its compressed code in `data`."""

    def __init__(self, index, data):
        self.index, self.data = index, data

    def find_spec(self, name, path=None, target=None):
        entry = self.index.get(name)
        if entry is None:
            return None
        is_package, origin = entry[:2]
        spec = importlib.machinery.ModuleSpec(name, self, origin=origin, is_package=is_package)
        spec.has_location = True
        if is_package:
            spec.submodule_search_locations = [os.path.dirname(origin)]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        _, _, offset, length = self.index[module.__name__]
        code = marshal.loads(zlib.decompress(memoryview(self.data)[offset:offset + length]))
        exec(code, module.__dict__)

    def get_resource_reader(self, name):
        return _Files(os.path.dirname(self.index[name][1]))


class _Files:
    """importlib.resources' view of a package: a directory that is not there. Reading a data
    file fails; `certifi.where()` names its CA bundle's path, which nothing here reads (TLS is
    the host's)."""

    def __init__(self, path):
        self.path = path

    def files(self):
        import pathlib
        return pathlib.Path(self.path)


class Hooks:
    """Runs `HOOKS[name](module)` once the module has run, whichever finder found it (this
    bundle, the data runtime's, or the host's files in the guest's unit tests)."""

    def find_spec(self, name, path=None, target=None):
        hook = HOOKS.get(name)
        if hook is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                spec.loader = _Hooked(spec.loader, hook, QUIET.get(name))
                return spec
        return None


class _Hooked:
    def __init__(self, loader, hook, quiet):
        self._loader, self._hook, self._quiet = loader, hook, quiet

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        if self._quiet is None:
            self._loader.exec_module(module)
        else:
            import warnings
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=re.escape(self._quiet))
                self._loader.exec_module(module)
        self._hook(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def install(collected=None):
    """Runs `HOOKS`, and serves `collected` (`(index, data)`) to `import` before the path
    finders (which find nothing at run time); both first in `sys.meta_path`."""
    if collected is not None:
        sys.meta_path.insert(0, Finder(*collected))
    if not any(isinstance(f, Hooks) for f in sys.meta_path):
        sys.meta_path.insert(0, Hooks())


def load(entries):
    """`(index, data)` from the first of `entries` (directories) holding `BLOB`. The data is
    kept as read, one bytes object: nothing is copied, so nothing freed is left behind in the
    snapshot's memory."""
    for entry in entries:
        path = os.path.join(entry, BLOB)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                data = f.read()
            head = int.from_bytes(data[:4], "little")
            index = marshal.loads(memoryview(data)[4:4 + head])
            return {name: (p, o, 4 + head + a, n) for name, (p, o, a, n) in index.items()}, data
    raise ImportError(f"none of {entries} holds {BLOB}: the build did not compile the on-demand packages")


def size(collected):
    """Bytes the compressed code takes."""
    return len(collected[1])
