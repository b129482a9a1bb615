"""An asyncio event loop that hands tool calls to the host in batches.

Tool stubs register a call with the Broker and await a future. The loop only talks to the host
when it has nothing else to run: then every call made since the last exchange goes over in one
`wait_for_tools` import, which blocks (the host suspends the wasm instance) until some results
are in or the next timer is due. So `asyncio.gather` of N calls costs one round trip, and a
partial answer wakes exactly the tasks whose results came back. A lone call with nothing else
to run makes that same wait from its own `await` (`Broker.call_tool`), without turning the loop.
"""

import asyncio
import asyncio.base_events
import json
import math
import time

from .errors import ToolError
from .wire import is_utf8


def _encoder():
    """A call's arguments as JSON: `JSONEncoder(allow_nan=False, ensure_ascii=False).encode`,
    with its C encoder made once instead of at every call (`iterencode` makes one each time):
    0.6 µs instead of 1.6 for `{"a": 12345, "b": 17}` on host CPython 3.13. The C encoder's
    arguments are CPython 3.13's and 3.14's (the guest's); where they differ, or the two
    disagree on a sample, the plain `encode`."""
    plain = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
    markers = {}
    try:
        c = json.encoder.c_make_encoder(
            markers, plain.default, json.encoder.encode_basestring, None,
            plain.key_separator, plain.item_separator, False, False, False)
    except (AttributeError, TypeError):
        return plain.encode

    def encode(o):
        try:
            return "".join(c(o, 0))
        except BaseException:
            # The containers it was inside when it failed (its check for cycles).
            markers.clear()
            raise

    sample = {"a": [1, 2.5, None, True, "é\n\x00"], "b": {"c": [], "d": -0.0}}
    try:
        same = encode(sample) == plain.encode(sample)
    except Exception:
        same = False
    return encode if same else plain.encode


_encode = _encoder()


_scan = json.JSONDecoder().scan_once


def _decode(payload):
    """`json.loads(payload)`: the scanner alone when it takes the whole text (a result as the
    host sends it), 0.17 µs instead of 0.95 on host CPython; else `json.loads`, for its errors
    and the whitespace around a value."""
    try:
        value, end = _scan(payload, 0)
    except StopIteration:
        end = -1
    return value if end == len(payload) else json.loads(payload)


class Deadlock(RuntimeError):
    pass


HIBERNATE = object()
"""What `wait_for_tools` returns when the host asks the program to get off the stack."""


class Hibernate(BaseException):
    """Unwinds the runtime's own event loop out of the export that runs it, leaving the
    program's tasks pending in memory (`runner.resume_program` re-enters the loop). `task` is
    set by the runner on its way out."""

    task = None


class Broker:
    """Tool calls made by the program, and the exchange with the host.

    `wait_for_tools(calls, timeout_ms)` takes a list of (id, name, input_json, namespace) and returns a list
    of (id, ok, payload): payload is JSON text when ok, the error message otherwise; or
    `HIBERNATE`, when the host asks the program to get off the stack. It may be set after
    construction, as long as it is set before the first exchange.
    """

    def __init__(self, wait_for_tools=None):
        self.wait_for_tools = wait_for_tools
        self._new = []
        self._outstanding = {}
        self._seq = 0
        self.rounds = 0
        # The last exchange unwound (`Hibernate`): the next one takes its place.
        self.resuming = False
        # A call's own exchange was answered `HIBERNATE`: the loop's next wait unwinds.
        self.unwinding = False

    def reset(self, wait_for_tools):
        """For the next program of a live session (call ids start again at call_1)."""
        self.wait_for_tools = wait_for_tools
        self._new = []
        self._outstanding = {}
        self._seq = 0
        self.rounds = 0
        self.resuming = False
        self.unwinding = False

    def call(self, name, args, namespace=""):
        loop = asyncio.get_running_loop()
        label = f"{namespace}.{name}" if namespace else name
        try:
            payload = _encode(args)
        except (TypeError, ValueError) as e:
            raise TypeError(f"arguments to tool {label!r} must be JSON-serialisable: {e}") from None
        if not is_utf8(payload):
            raise TypeError(
                f"arguments to tool {label!r} hold text that is not valid Unicode (a lone surrogate such as "
                "'\\ud800', which no JSON parser takes): drop or replace it"
            )
        self._seq += 1
        call_id = f"call_{self._seq}"
        fut = loop.create_future()
        self._new.append((call_id, name, payload, namespace))
        self._outstanding[call_id] = (fut, label)
        return fut

    async def call_tool(self, name, args, namespace=""):
        fut = self.call(name, args, namespace)
        loop = fut.get_loop()
        selector = getattr(loop, "_selector", None)
        # Nothing else could run while the host answers (no task ready, no timer, no other
        # call out, no cancellation asked): the call is handed over from here, without the
        # turns of the loop that would only end in the same wait. A sequential `await tool()`
        # costs a third less on host CPython (8.8 -> 6.0 µs a round, 11.2 -> 5.8 in a session;
        # `benches/python/guest_round.py`).
        if (
            len(self._outstanding) == 1
            and not loop._ready
            and not loop._scheduled
            and not self.resuming
            and isinstance(selector, _HostSelector)
        ):
            task = asyncio.current_task(loop)
            if task is not None and not task.cancelling():
                self.exchange(None, selector.hibernatable, eager=True)
                if fut.done():
                    return fut.result()
        return await fut

    def waiting(self):
        """Whether a live task waits on a call (abandoned calls, e.g. after a timeout, do not count)."""
        return bool(self._new) or any(not f.done() for f, _ in self._outstanding.values())

    def exchange(self, timeout, hibernatable=False, eager=False):
        """Hands the new calls to the host and takes the results that came back. With
        `hibernatable` (the runtime's own loop is running, with only the runtime's frames under
        it), the host's `HIBERNATE` raises `Hibernate`; otherwise the program's own frames are
        on the stack, so the host is asked again and goes on waiting. `eager`: a call's own
        exchange (`call_tool`), under the program's frames: a `HIBERNATE` is kept for the
        loop's next wait, which unwinds then (the call's task awaits its future meanwhile)."""
        calls, self._new = self._new, []
        timeout_ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
        results = self.wait_for_tools(calls, timeout_ms)
        if results is HIBERNATE:
            if hibernatable:
                self.resuming = True
                if eager:
                    self.unwinding = True
                    return
                raise Hibernate()
            results = self.wait_for_tools([], timeout_ms)
            if results is HIBERNATE:
                results = []
        self.rounds += 1
        for call_id, ok, payload in results:
            entry = self._outstanding.pop(call_id, None)
            if entry is None:
                continue
            fut, name = entry
            if fut.done():
                continue
            if not ok:
                fut.set_exception(ToolError(payload, tool=name, call_id=call_id))
                continue
            try:
                fut.set_result(_decode(payload))
            except ValueError as e:
                fut.set_exception(ToolError(f"tool {name!r} returned invalid JSON: {e}", name, call_id))


class _HostSelector:
    """Stands in for the selector BaseEventLoop polls: blocking here means asking the host."""

    def __init__(self, broker):
        self._broker = broker
        # Set by the runner while it drives this loop itself (`runner._drive`): only then may a
        # wait unwind the loop out of the export.
        self.hibernatable = False

    def select(self, timeout=None):
        if self._broker.unwinding:
            # The host asked a call's own exchange to hibernate (`Broker.call_tool`): its
            # task has yielded since, and only the runtime's frames are on the stack now.
            self._broker.unwinding = False
            raise Hibernate()
        # The first wait after a resume goes to the host even when a timer is due (timeout
        # 0): it is the wait that unwound, and ends as that wait would have, so that the
        # program goes on exactly as a run that never hibernated (a journal's replay of it
        # expects that wait's answer, not the timer's callbacks first).
        if self._broker.resuming and self._broker.waiting():
            self._broker.resuming = False
            self._broker.exchange(max(0, timeout) if timeout is not None else None, self.hibernatable)
            return []
        if timeout is not None and timeout <= 0:
            return []
        if self._broker.waiting():
            self._broker.exchange(timeout, self.hibernatable)
        elif timeout is None:
            raise Deadlock(
                "every task is waiting and nothing can wake them: no tool call is outstanding "
                "and no timer is set"
            )
        else:
            time.sleep(timeout)
        return []

    def close(self):
        pass


class BatchingEventLoop(asyncio.base_events.BaseEventLoop):
    def __init__(self, broker):
        super().__init__()
        self._selector = _HostSelector(broker)

    def _process_events(self, event_list):
        pass

    def _write_to_self(self):
        pass

    def close(self):
        if not self.is_closed():
            super().close()
            self._selector = None
