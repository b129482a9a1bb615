"""Tool names to Python identifiers.

Rules (in order): `-` and whitespace become `_`; any other character outside [A-Za-z0-9_] is
dropped; a leading digit gets a `_` prefix; a Python keyword, a builtin, or a name the runtime
puts in the program's namespace gets a `_tool` suffix, so no tool can shadow `print`,
`asyncio` or `ToolError`. Two tools that end up with the same identifier are rejected.

A tool may belong to a namespace (one per MCP server): the namespace's name follows the rules
above and must not collide with a top-level tool; the tool becomes an attribute of it, where
only keywords and dunder names need the suffix (`fs.open`, not `fs.open_tool`).
"""

import builtins
import keyword
import re

from .errors import InvalidTools

# Names the runtime binds in every program's namespace (see runner.base_namespace).
RUNTIME_NAMES = frozenset({"asyncio", "json", "ToolError", "tools", "search_tools", "describe_tools"})

_SEPARATORS = re.compile(r"[\s\-]")
_INVALID = re.compile(r"[^A-Za-z0-9_]")


def is_reserved(name):
    return (
        keyword.iskeyword(name)
        or name in RUNTIME_NAMES
        or hasattr(builtins, name)
        or (name.startswith("__") and name.endswith("__"))
    )


def normalize_name(name, member=False):
    """The Python identifier for a tool name; raises InvalidTools if nothing usable is left.

    A `member` (a tool inside a namespace object, `github.create_issue`) cannot shadow
    anything, so only keywords and dunder names get the suffix there."""
    if not isinstance(name, str) or not name:
        raise InvalidTools("tool name must be a non-empty string")
    ident = _INVALID.sub("", _SEPARATORS.sub("_", name))
    if not ident.strip("_"):
        raise InvalidTools(f"tool name {name!r} has no characters usable in a Python identifier")
    if ident[0].isdigit():
        ident = "_" + ident
    if keyword.iskeyword(ident) or (ident.startswith("__") and ident.endswith("__")) or (
        not member and is_reserved(ident)
    ):
        ident += "_tool"
    return ident


def assign_python_names(names, member=False, what="tool"):
    """Map each original name to its identifier, refusing duplicates and collisions."""
    mapping = {}
    owner = {}
    for name in names:
        if name in mapping:
            raise InvalidTools(f"{what} {name!r} is defined twice")
        ident = normalize_name(name, member)
        if ident in owner:
            raise InvalidTools(
                f"{what}s {owner[ident]!r} and {name!r} both become the Python name {ident!r}; "
                "rename one of them"
            )
        owner[ident] = name
        mapping[name] = ident
    return mapping
