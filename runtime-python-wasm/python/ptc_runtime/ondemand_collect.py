"""Compiles the packages programs import on demand, with the sandbox's own CPython, into one
packed blob for `ondemand.Finder`.

Run at build time for the component (`build/ondemand_app.py`, a pre-initialisation of its
own whose memory is thrown away: compiling touches about 18 MB, which would otherwise stay in
the component's memory image, freed or not) and at the data runtime's pre-initialisation.

Besides every module of the packages, the standard-library modules they import that the
snapshot lacks are compiled too, found by reading import statements (`ast`): inside a
package's functions as well (`netrc` in `requests.utils.get_netrc_auth`), a standard-library
module's own top level only, never under `if TYPE_CHECKING:`. A name nothing provides (an
optional dependency: `brotli`, `h2`, `socks`) is left out, and raises `ImportError` at run
time, which those packages catch.
"""

import ast
import collections
import importlib.machinery
import marshal
import os
import sys
import zlib

from .ondemand import MARKER, SITE

SKIP = ("httpx._main", "idna.cli", "charset_normalizer.cli", "certifi.tests")
"""Command-line entry points and tests, which no program runs here."""


def _module_files(root, package):
    """(module name, path, is_package) of every `.py` file of `package` under `root`."""
    base = os.path.join(root, package)
    if os.path.isfile(base + ".py"):
        yield package, base + ".py", False
        return
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(folder, root).replace(os.sep, ".")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            if name == "__init__.py":
                yield rel, os.path.join(folder, name), True
            else:
                yield f"{rel}.{name[:-3]}", os.path.join(folder, name), False


def _statements(tree, functions):
    """The import statements that may run: not under `if TYPE_CHECKING:`, and inside
    functions only with `functions` (a standard-library module's own lazy imports are its
    business; a package's are what a program's calls reach)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack += node.orelse
            continue
        if not functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        stack += ast.iter_child_nodes(node)


def imported_names(tree, name, is_package, functions):
    """The absolute module names a module's import statements may load (every prefix, and
    `from x import y`'s `x.y`, which may be a submodule)."""
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in _statements(tree, functions):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
            continue
        if node.level:
            parts = package.split(".")
            if node.level - 1 >= len(parts):
                continue
            base = ".".join(parts[: len(parts) - (node.level - 1)])
            module = f"{base}.{node.module}" if node.module else base
        else:
            module = node.module
        found.append(module)
        found += [f"{module}.{alias.name}" for alias in node.names if alias.name != "*"]
    names = []
    for full in found:
        parts = full.split(".")
        names += [".".join(parts[: i + 1]) for i in range(len(parts))]
    return names


def _stdlib():
    # `os` is frozen, its `__file__` a guess; `json` is read from the standard library's files
    # (or its zip, in the data runtime: found there at run time, so none of it is collected).
    import json
    return os.path.dirname(os.path.dirname(json.__file__))


class _Collected:
    def __init__(self, root):
        self.root = root
        self.index = {}  # name -> (is_package, origin, offset, length)
        self.parts = []
        self.offset = 0
        self.stdlib = _stdlib()
        self._paths = {}  # a collected standard-library package's locations, to find its modules

    def add(self, name, path, is_package, functions):
        """Compiles one module; the names its imports may load. Its tree is dropped at once."""
        with open(path, "rb") as f:
            source = f.read()
        shown = path
        if path.startswith(self.root + os.sep):
            shown = SITE + path[len(self.root):].replace(os.sep, "/")
        data = zlib.compress(marshal.dumps(compile(source, shown, "exec", dont_inherit=True)), 9)
        self.index[name] = (is_package, shown, self.offset, len(data))
        self.parts.append(data)
        self.offset += len(data)
        if is_package:
            self._paths[name] = [os.path.dirname(path)]
        return imported_names(ast.parse(source, path), name, is_package, functions)

    def locate(self, name):
        """The standard library's source of `name` (never importing it or its parents), or
        None: a name it lacks, a built-in module, or one found outside it (an optional
        dependency installed beside the build's Python is not the sandbox's)."""
        parent = name.rpartition(".")[0]
        if parent:
            loaded = sys.modules.get(parent)
            path = getattr(loaded, "__path__", None) if loaded is not None else self._paths.get(parent)
            if path is None:
                return None
        else:
            path = [self.stdlib]
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None
        if not spec.origin.startswith(self.stdlib + os.sep):
            return None
        return spec.origin, spec.submodule_search_locations is not None


def collect(root, packages, extra=(), skip=SKIP):
    """Compiles `packages` (directories or modules under `root`) but the modules in `skip`
    (and theirs), `extra` standard-library modules, and the standard-library modules they
    import that are not loaded yet: `(index, data)` for `ondemand.Finder`."""
    out = _Collected(root)
    pending = collections.deque()  # first in, first out: a package before its modules
    for package in packages:
        for name, path, is_package in _module_files(root, package):
            if name.endswith(".__main__") or any(name == s or name.startswith(s + ".") for s in skip):
                continue
            pending += out.add(name, path, is_package, True)
    for name in extra:
        pending += [".".join(name.split(".")[: i + 1]) for i in range(name.count(".") + 1)]
    while pending:
        wanted = pending.popleft()
        if wanted in sys.modules or wanted in out.index or wanted in sys.builtin_module_names:
            continue
        found = out.locate(wanted)
        if found is not None:
            pending += out.add(wanted, found[0], found[1], False)
    return out.index, b"".join(out.parts)


def site(entries, extra=(), skip=SKIP):
    """`collect` over the first of `entries` (directories) holding the build's packages."""
    for entry in entries:
        marker = os.path.join(entry, MARKER)
        if os.path.isfile(marker):
            with open(marker) as f:
                return collect(entry, f.read().split(), extra, skip)
    raise ImportError(f"none of {entries} holds {MARKER}: the build did not unpack the on-demand packages")


def save(collected, path):
    """Writes `collect`'s result for `ondemand.load`: the index's length (4 bytes, little
    endian), the marshalled index, the compressed code."""
    index, data = collected
    head = marshal.dumps(index)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(4, "little") + head + data)
