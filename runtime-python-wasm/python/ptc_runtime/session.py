"""A live session: one namespace that the programs of a session share, and its state as bytes.

Each program of a session (a "cell") runs in the same `__main__` module, so its globals,
imports, functions and classes are there for the next one. Tools are bound again for every
cell (the set may differ) and removed afterwards, unless the program rebound the name.

A snapshot keeps what can be rebuilt elsewhere:
- imported modules, by name (`import json as j` comes back as `j`);
- functions and classes defined in the session, by their source (cells stay in `linecache`);
- every other global that pickles (shared references between them are kept);
and lists each global it could not keep, with the reason, so a model can define it again.
"""

import importlib
import inspect
import io
import linecache
import pickle
import re
import sys
import textwrap
import types
import weakref

from .errors import InvalidTools

FORMAT = 1


class SnapshotTooLarge(Exception):
    pass


class Live:
    """The namespace of one session and the tools bound in it for the current cell."""

    def __init__(self, builtins, injected):
        self.module = types.ModuleType("__main__")
        self.globals = self.module.__dict__
        self.globals["__builtins__"] = builtins
        for name, value in injected.items():
            self.globals.setdefault(name, value)
        self.cells = 0
        self.bound = {}
        self.broker = None
        # The cell each class of the session was defined in: `inspect` finds a function's
        # source through its code object, but a class only through its module's file.
        self.class_cells = weakref.WeakKeyDictionary()
        self.filename = None
        # The runner's broker and event loop, kept between programs while no task outlives one.
        self.run = None
        # (definitions, specs, stubs, or the InvalidTools they raised): the last tools given.
        self._tools = None

    def tools_for(self, defs, parse, bind):
        """(specs, stubs) for `defs`: the previous program's when the definitions are the same
        (the stubs call through the session, so they serve any program). `defs` is None when
        the host did not send them again: the previous program's, error included."""
        if defs is not None and (self._tools is None or defs != self._tools[0]):
            try:
                specs = parse(defs)
                self._tools = (defs, specs, bind(specs, self.call_tool), None)
            except InvalidTools as e:
                self._tools = (defs, None, None, e)
        if self._tools is None:
            raise InvalidTools("no tools were given, and this session has none from an earlier program")
        _, specs, stubs, error = self._tools
        if error is not None:
            raise error
        return specs, stubs

    def call_tool(self, name, args, namespace=""):
        return self.broker.call_tool(name, args, namespace)

    def begin(self, broker, tools, return_type):
        """Binds this cell's tools; returns the cell's file name (`<code #N>`)."""
        self.cells += 1
        self.broker = broker
        self.filename = f"<code #{self.cells}>"
        self.globals["__ptc_return__"] = return_type
        self.globals.update(tools)
        self.bound = tools
        return self.filename

    def end(self, code):
        """Unbinds the cell's tools (a name the program rebound keeps its new value) and notes
        the cell of each class it defined (only a cell that says `class` can: the scan is over
        every global)."""
        for name, stub in self.bound.items():
            if self.globals.get(name) is stub:
                del self.globals[name]
        self.bound = {}
        if "class" in code:
            self.note_classes(self.filename)

    def note_classes(self, filename):
        for value in self.globals.values():
            if isinstance(value, type) and value.__module__ == "__main__" and value not in self.class_cells:
                self.class_cells[value] = filename

    def enter(self):
        """Makes this namespace `__main__`, so pickle finds the session's own functions and
        classes by name. Returns what to put back."""
        previous = sys.modules.get("__main__")
        sys.modules["__main__"] = self.module
        return previous

    @staticmethod
    def leave(previous):
        if previous is None:
            sys.modules.pop("__main__", None)
        else:
            sys.modules["__main__"] = previous

    def state_names(self):
        # Dunder names are the module's and the runtime's (`__builtins__`, `__ptc_return__`).
        return [n for n in self.globals if n not in self.bound and not (n.startswith("__") and n.endswith("__"))]

    def snapshot(self, max_bytes, injected=()):
        """(bytes, kept names, module names, [(name, reason)] not kept).

        Bounded: every pickle is written to a sink that stops it once it passes `max_bytes`
        (the probes of single values only count their bytes), so a state too large is refused
        before it is copied whole, and running out of the session's memory on the way is
        refused in words too; the session and its globals stay either way."""
        try:
            return self._snapshot(max_bytes, injected)
        except MemoryError:
            raise SnapshotTooLarge(
                "there is not enough memory left in this session to pickle its state: delete large globals "
                "(del name) or keep them in files, then snapshot again") from None

    def _snapshot(self, max_bytes, injected):
        modules, sources, plain, dependent, dropped, sizes = {}, [], {}, {}, [], {}
        previous = self.enter()
        try:
            for name in self.state_names():
                value = self.globals[name]
                if name in injected and value is injected[name]:
                    continue
                if isinstance(value, types.ModuleType):
                    modules[name] = value.__name__
                    continue
                if _defined_here(value) and getattr(value, "__name__", None) == name:
                    source = _source(value, self.class_cells.get(value))
                    if source is None:
                        dropped.append((name, "its source is not available (made by exec or a "
                                              "lambda): define it again"))
                    else:
                        sources.append((name, source))
                    continue
                sink = _Sink(max_bytes, keep=False)
                probe = _Probe(sink, protocol=pickle.HIGHEST_PROTOCOL)
                try:
                    probe.dump(value)
                except SnapshotTooLarge:
                    raise _too_large(max_bytes, {**sizes, name: sink.size}) from None
                except Exception as e:
                    dropped.append((name, f"{type(value).__name__} cannot be pickled "
                                          f"({type(e).__name__}: {e}): create it again"))
                    continue
                sizes[name] = sink.size
                (dependent if probe.uses_session else plain)[name] = value
            # Restored in this order: modules, values that need nothing of the session's own
            # (`dataclass`, a constant), the session's functions and classes (whose
            # decorators, bases and defaults may use those values), then the values that are
            # instances of those classes or refer to those functions. Each group is one
            # pickle, so references shared between its values stay shared.
            try:
                plain_payload = _pickled(plain, max_bytes)
                dependent_payload = _pickled(dependent, max_bytes - len(plain_payload))
            except SnapshotTooLarge:
                raise _too_large(max_bytes, sizes) from None
        finally:
            self.leave(previous)
        state = {"format": FORMAT, "python": list(sys.version_info[:2]), "modules": modules,
                 "plain": plain_payload, "sources": sources, "dependent": dependent_payload}
        try:
            blob = _pickled(state, max_bytes)
        except SnapshotTooLarge:
            raise _too_large(max_bytes, sizes) from None
        kept = list(modules) + list(plain) + [n for n, _ in sources] + list(dependent)
        return blob, kept, list(modules.values()), dropped

    def restore(self, blob):
        """Rebuilds a snapshot's state here. Returns (kept names, [(name, reason)] not kept)."""
        try:
            state = pickle.loads(blob)
        except Exception as e:
            raise ValueError(f"the snapshot's state cannot be read: {type(e).__name__}: {e}") from None
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError("the snapshot's state has an unknown format")
        kept, dropped = [], []
        for name, module in state["modules"].items():
            try:
                self.globals[name] = importlib.import_module(module)
                kept.append(name)
            except Exception as e:
                dropped.append((name, f"module {module!r} cannot be imported here ({e})"))
        previous = self.enter()
        try:
            self._load(state["plain"], kept, dropped)
            for name, source in state["sources"]:
                filename = f"<restored {name}>"
                try:
                    code = compile(source, filename, "exec", dont_inherit=True)
                    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
                    exec(code, self.globals)
                    self.note_classes(filename)
                    kept.append(name)
                except BaseException as e:
                    dropped.append((name, f"its source failed to run again ({type(e).__name__}: {e})"))
            self._load(state["dependent"], kept, dropped)
        finally:
            self.leave(previous)
        return kept, dropped

    def _load(self, payload, kept, dropped):
        try:
            data = pickle.loads(payload)
        except Exception as e:
            dropped.append(("*", f"pickled globals could not be loaded ({type(e).__name__}: {e})"))
            return
        self.globals.update(data)
        kept += list(data)


class _Sink:
    """The file a pickle is written to: keeps (or, for a probe, only counts) what is written,
    and stops the pickle with SnapshotTooLarge once it passes `limit` bytes."""

    def __init__(self, limit, keep=True):
        self.limit = limit
        self.size = 0
        self.buffer = io.BytesIO() if keep else None

    def write(self, data):
        n = memoryview(data).nbytes
        self.size += n
        if self.size > self.limit:
            raise SnapshotTooLarge()
        if self.buffer is not None:
            self.buffer.write(data)
        return n


def _pickled(value, limit):
    sink = _Sink(limit)
    pickle.Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return sink.buffer.getvalue()


def _too_large(limit, sizes):
    """What a model reads when the state does not fit: the limit and the largest globals."""
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    named = ", ".join(f"{n} ({s} bytes{' or more' if s > limit else ''})" for n, s in largest if s)
    return SnapshotTooLarge(
        f"the session's state pickles to more than {limit} bytes, the most a snapshot may hold"
        + (f"; the largest globals: {named}" if named else "")
        + ": delete large globals (del name) or keep them in files, then snapshot again")


class _Probe(pickle.Pickler):
    """Pickles a value to see whether it can be, and whether it refers to a function or class
    defined in the session (which must be rebuilt from source before the value is loaded)."""

    uses_session = False

    def reducer_override(self, obj):
        if _defined_here(obj):
            self.uses_session = True
        return NotImplemented


def _defined_here(value):
    return isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) == "__main__"


def _source(value, cell):
    if getattr(value, "__name__", "") == "<lambda>":
        return None
    try:
        if isinstance(value, type):
            return _class_source(value, cell)
        return textwrap.dedent(inspect.getsource(value))
    except (OSError, TypeError, IndexError):
        return None


def _class_source(cls, cell):
    """A class's source, decorators included, from the cell that defined it."""
    lines = linecache.getlines(cell) if cell else []
    first = getattr(cls, "__firstlineno__", None)  # CPython 3.13+
    if first is None:  # older hosts (the unit tests): the first `class Name` of the cell
        pattern = re.compile(rf"^\s*class\s+{re.escape(cls.__name__)}\b")
        first = next((i + 1 for i, line in enumerate(lines) if pattern.match(line)), None)
    if not lines or first is None:
        return None
    start = first - 1
    while start > 0 and lines[start - 1].lstrip().startswith("@"):
        start -= 1
    return textwrap.dedent("".join(inspect.getblock(lines[start:])))
