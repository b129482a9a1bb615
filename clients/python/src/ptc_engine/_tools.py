"""Tools: Python callables (sync or async) offered to a program, with the JSON Schema the server
checks their inputs against.

A schema comes from the callable's signature the way the agent frameworks make theirs: with
pydantic, from type hints (`int`, `str | None`, `Literal[...]`, `TypedDict`, dataclasses,
pydantic models, defaults), and each parameter's description from the docstring (Google,
NumPy or reST style). A call's input is validated and converted with the same model before the
function sees it, so a parameter typed as a model gets a model; its return value goes back as
JSON with pydantic's rules (models, dataclasses, dates, enums, sets), and bytes, which have no
JSON form, are refused in words.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

import docstring_parser
import pydantic
import pydantic_core

from ._errors import InvalidToolError

Handler = Callable[..., Any]


class ToolFailure(Exception):
    """Raise it from a tool to fail the call with exactly this message: the program's
    `ToolError` carries it as it is. (Any other exception reaches the program as
    `"<ExceptionType>: <message>"`.) This library raises it too, for an input that does not
    fit the tool's schema or a result with no JSON form."""


@dataclass
class Tool:
    """A tool a program may call: `await name(**input)` (or `await namespace.name(...)`).

    `handler` is called with the input's fields as keyword arguments; it may be sync (run in a
    thread) or async. With `parameters` given, the input is passed as is; otherwise the schema
    and the conversion come from the handler's signature. With `requires_approval`, each call
    waits for the run's `on_approval` to approve it. `returns` (a JSON Schema; from a function,
    its return annotation's) is shown to the model after the tool's signature; without it, the
    shape its results had is shown once a call returned.
    """

    name: str
    handler: Handler
    description: str = ""
    parameters: dict[str, Any] | None = None
    namespace: str | None = None
    requires_approval: bool = False
    returns: dict[str, Any] | None = None
    _model: type[pydantic.BaseModel] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_function(
        cls,
        fn: Handler,
        *,
        name: str | None = None,
        description: str | None = None,
        namespace: str | None = None,
        requires_approval: bool = False,
    ) -> Tool:
        """A tool from a function: its name, its docstring's summary, and its parameters."""
        if not callable(fn):
            raise InvalidToolError(f"{fn!r} is not callable: a tool is a function (or a Tool)")
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise InvalidToolError(f"{fn!r} has no name: give it one with Tool.from_function(fn, name=...)")
        key = _cache_key(fn)
        made = _MADE.get(key) if key is not None else None
        if made is None:
            doc = docstring_parser.parse(inspect.getdoc(fn) or "")
            summary = "\n\n".join(p for p in (doc.short_description, doc.long_description) if p)
            model = _input_model(fn, tool_name, {p.arg_name: p.description or "" for p in doc.params})
            shape = _returns(fn)
            made = (model, json.dumps(_schema(model)), summary, None if shape is None else json.dumps(shape))
            if key is not None:
                if len(_MADE) >= _MADE_MAX:
                    _MADE.clear()
                _MADE[key] = made
        # Each tool gets its own copy of the cached schemas (a caller may change its own):
        # decoded from their JSON text, in a third of a deep copy's time (2.0 against 6.2 µs).
        model, schema, summary, returns = made
        return cls(
            name=tool_name,
            handler=fn,
            description=description if description is not None else summary,
            parameters=json.loads(schema),
            namespace=namespace,
            requires_approval=requires_approval,
            returns=None if returns is None else json.loads(returns),
            _model=model,
        )

    @property
    def blocking(self) -> bool:
        """Whether the handler is sync: it is then called in a thread (`call_blocking`)."""
        return not inspect.iscoroutinefunction(self.handler)

    async def call(self, arguments: Mapping[str, Any]) -> str:
        """Runs the tool on a program's input; its result as JSON text (or an exception). A
        sync handler runs in a thread (`asyncio.to_thread`)."""
        kwargs = self._arguments(arguments)
        if not self.blocking:
            value = await self.handler(**kwargs)
        else:
            value = await asyncio.to_thread(self.handler, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        return to_json(self.name, value)

    def call_blocking(self, arguments: Mapping[str, Any], loop: asyncio.AbstractEventLoop) -> str:
        """`call` for a sync handler, on the calling thread (not `loop`'s, which this blocks
        otherwise): an awaitable the handler returns is awaited on `loop`."""
        value = self.handler(**self._arguments(arguments))
        if inspect.isawaitable(value):
            value = asyncio.run_coroutine_threadsafe(_awaited(value), loop).result()
        return to_json(self.name, value)

    def _arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """A program's input as the handler's keyword arguments, validated and converted by the
        tool's input model if it has one."""
        if self._model is None:
            return dict(arguments)
        try:
            validated = self._model.model_validate(dict(arguments))
        except pydantic.ValidationError as e:
            raise ToolFailure(_validation_message(self.name, e)) from None
        return {name: getattr(validated, name) for name in type(validated).model_fields}


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


# A function's input model, schema and summary, by what they are made from: making them costs
# 0.5-0.7 ms a function (pydantic), every run for tools given as functions, and every run for
# the frameworks' closures (new function objects of the same code). 512 entries at most.
_MADE: dict[Hashable, tuple[type[pydantic.BaseModel], str, str, str | None]] = {}
_MADE_MAX = 512


def _cache_key(fn: Handler) -> Hashable | None:
    """What a function's schema is made from (its code, defaults, annotations, docstring, and
    whether it is bound), or None when that cannot be a key (no code, unhashable defaults)."""
    target = inspect.unwrap(fn)
    code = getattr(target, "__code__", None)
    if code is None:
        return None
    key = (
        code,
        inspect.ismethod(target),
        getattr(target, "__defaults__", None),
        tuple((getattr(target, "__kwdefaults__", None) or {}).items()),
        tuple((getattr(target, "__annotations__", None) or {}).items()),
        getattr(target, "__doc__", None),
        getattr(target, "__module__", None),
    )
    try:
        hash(key)
    except TypeError:
        return None
    return key


def as_tool(obj: Tool | Handler) -> Tool:
    """`obj` as a Tool: a Tool as it is, a function through `Tool.from_function`."""
    return obj if isinstance(obj, Tool) else Tool.from_function(obj)


def tool(
    fn: Handler | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
) -> Any:
    """Decorator: `@tool` or `@tool(name=..., description=..., requires_approval=True)` makes a
    function a Tool."""

    def wrap(f: Handler) -> Tool:
        return Tool.from_function(f, name=name, description=description, requires_approval=requires_approval)

    return wrap(fn) if fn is not None else wrap


def _input_model(fn: Handler, name: str, docs: dict[str, str]) -> type[pydantic.BaseModel]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise InvalidToolError(f"tool {name!r}: its signature cannot be read ({e})") from None
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidToolError(
                f"tool {name!r} takes *{param.name}: give each parameter a name (a program calls tools with keywords)"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise InvalidToolError(f"tool {name!r}: parameter {param.name!r} is positional-only; programs pass keywords")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, pydantic.Field(default, description=docs.get(param.name) or None))
    try:
        return pydantic.create_model(f"{name}_input", __config__=pydantic.ConfigDict(arbitrary_types_allowed=False), **fields)
    except Exception as e:
        raise InvalidToolError(f"tool {name!r}: its parameters have no JSON Schema ({e})") from None


def _returns(fn: Handler) -> dict[str, Any] | None:
    """The JSON Schema of `fn`'s return annotation; None without one, or for one that says
    nothing (`Any`, `None`) or has no JSON Schema."""
    try:
        hint = get_type_hints(fn, include_extras=True).get("return", Any)
    except Exception:
        return None
    if hint in (Any, None, type(None), object):
        return None
    try:
        schema = pydantic.TypeAdapter(hint).json_schema()
    except Exception:
        return None
    _drop_titles(schema)
    return schema or None


def _schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    _drop_titles(schema)
    return schema


def _drop_titles(node: Any) -> None:
    """Removes pydantic's generated `title`s (`"City"` for `city`): a model reads the name."""
    if isinstance(node, dict):
        if isinstance(node.get("title"), str):
            del node["title"]
        for key, value in node.items():
            # Under `properties` (and `$defs`) the keys are names, not keywords.
            if key in ("properties", "$defs") and isinstance(value, dict):
                for sub in value.values():
                    _drop_titles(sub)
            else:
                _drop_titles(value)
    elif isinstance(node, list):
        for item in node:
            _drop_titles(item)


def _validation_message(name: str, error: pydantic.ValidationError) -> str:
    problems = []
    for e in error.errors()[:5]:
        where = ".".join(str(p) for p in e["loc"])
        problems.append(f"{where}: {e['msg']}" if where else e["msg"])
    return f"invalid input for tool {name!r}: " + "; ".join(problems)


_PLAIN = frozenset({str, int, bool, type(None)})
"""Types whose values are their JSON as they are (no bytes in them, no NaN)."""

# `json.dumps` with options makes an encoder at every call: made once, it is 1.3 µs less a result.
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def to_json(name: str, value: Any) -> str:
    """A tool's return value as JSON text, with pydantic's conversions; bytes are refused."""
    # A plain value is its own JSON form: no walk for bytes, no conversion (`3`: 2.5 µs to 1.0).
    plain = type(value) in _PLAIN
    if not plain and _has_bytes(value):
        raise ToolFailure(
            f"tool {name!r} returned bytes, which have no JSON form: return text (decode it) or base64, "
            "or write a file and return its name"
        )
    try:
        return _encode(value if plain else pydantic_core.to_jsonable_python(value))
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as e:
        raise ToolFailure(f"tool {name!r} returned a value that is not JSON ({type(value).__name__}: {e})") from None


def _has_bytes(value: Any, depth: int = 0) -> bool:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return True
    if depth > 32:
        return False
    if isinstance(value, Mapping):
        return any(_has_bytes(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_has_bytes(v, depth + 1) for v in value)
    return False
