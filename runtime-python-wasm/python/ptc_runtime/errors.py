"""Exceptions the runtime shows to user code and to its caller."""


class ToolError(RuntimeError):
    """A tool call failed: the client reported an error, or the input broke the tool's schema.

    `tool` is the tool's original name and `message` the client's text; user code can catch it.
    A `RuntimeError`, as the code modes that run on Monty raise for a failed tool (strands'
    programs catch `except RuntimeError`), so their programs run here unchanged.
    """

    def __init__(self, message, tool=None, call_id=None):
        super().__init__(message)
        self.message = message
        self.tool = tool
        self.call_id = call_id


class UnknownToolError(ToolError, AttributeError):
    """A namespace has no callable tool of that name: a ToolError, and an AttributeError (so
    `hasattr` and `getattr(ns, name, default)` work)."""

    def __init__(self, message, tool=None, obj=None):
        ToolError.__init__(self, message, tool=tool)
        self.name = tool
        self.obj = obj


# Tracebacks print the classes as user code knows them, not as ptc_runtime.errors.ToolError.
ToolError.__module__ = "builtins"
UnknownToolError.__module__ = "builtins"


class InvalidTools(ValueError):
    """The tool definitions cannot be turned into Python functions (bad or colliding names)."""
