"""The standard library a program can import.

componentize-py snapshots the interpreter after importing the app; modules not imported by then
are absent at run time (the stdlib is not mounted). Importing them here makes them available
and makes `import json` in a program cost a dictionary lookup. docs/sandbox.md lists these modules.
"""

import importlib

PRELOADED = (
    # data and text
    "json", "pickle", "re", "string", "textwrap", "difflib", "unicodedata", "html", "html.parser",
    "csv", "io", "pprint", "base64", "binascii", "codecs", "struct", "tomllib",
    "xml.etree.ElementTree", "xml.dom.minidom", "urllib.parse", "email", "email.utils",
    "shlex", "fnmatch",
    # numbers and time
    "math", "cmath", "statistics", "decimal", "fractions", "numbers", "random", "datetime",
    "time", "calendar", "zoneinfo",
    # containers and functional tools
    "collections", "collections.abc", "itertools", "functools", "operator", "heapq", "bisect",
    "array", "copy", "graphlib", "types", "typing", "dataclasses", "enum", "abc",
    "contextlib", "weakref",
    # hashing, ids, compression
    "hashlib", "hmac", "secrets", "uuid", "zlib", "gzip", "zipfile",
    # networks as data
    "ipaddress",
    # the language itself
    "asyncio", "inspect", "traceback", "warnings", "keyword", "ast", "linecache",
    "importlib.resources",
)

# Strong references to every time zone, so `ZoneInfo(key)` is served from zoneinfo's cache at
# run time, when the tzdata files are no longer readable.
ZONES = {}


def _load_zones():
    import zoneinfo
    try:
        keys = zoneinfo.available_timezones()
    except Exception:
        return
    for key in sorted(keys):
        try:
            ZONES[key] = zoneinfo.ZoneInfo(key)
        except Exception:
            pass
    names = frozenset(ZONES)
    zoneinfo.available_timezones = lambda: set(names)


def preload():
    """Imports every module in PRELOADED. One this CPython lacks fails the build (raised during
    pre-initialisation), so docs/sandbox.md's list is what programs get."""
    missing = []
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(f"the sandbox's CPython lacks preloaded modules: {', '.join(missing)}")
    _load_zones()
