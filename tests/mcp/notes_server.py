"""A downstream MCP server for the tests, written with the official Python SDK (`mcp` on PyPI).

Its tools are annotated (readOnlyHint), so by default only the read-only ones are callable
from programs. It lists them three per page, can crash on request, hang, fail, and grow its
tool list at run time.

    python notes_server.py              # stdio
    python notes_server.py --http PORT  # Streamable HTTP at http://127.0.0.1:PORT/mcp
"""

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ListToolsResult, ToolAnnotations

READ_ONLY = ToolAnnotations(readOnlyHint=True)
WRITES = ToolAnnotations(readOnlyHint=False, destructiveHint=True)

NOTES = [
    {"id": 1, "title": "rust tips", "body": "borrow, don't clone"},
    {"id": 2, "title": "python tips", "body": "gather independent awaits"},
    {"id": 3, "title": "rust async", "body": "select! with care"},
]

class PagedServer(MCPServer):
    """Lists its tools three per page, so clients must follow `nextCursor`."""

    async def _handle_list_tools(self, ctx, params):
        tools = await self.list_tools()
        start = int(params.cursor) if params and params.cursor else 0
        page = ListToolsResult(tools=tools[start : start + 3])
        if start + 3 < len(tools):
            page.next_cursor = str(start + 3)
        return page


mcp = PagedServer("notes")


@mcp.tool(annotations=READ_ONLY)
def search_notes(query: str) -> list[dict]:
    """Notes whose title contains `query`."""
    return [n for n in NOTES if query in n["title"]]


@mcp.tool(annotations=READ_ONLY, structured_output=False)
def note_stats() -> str:
    """Counts, as JSON text."""
    return json.dumps({"count": len(NOTES), "titles": [n["title"] for n in NOTES]})


@mcp.tool(annotations=READ_ONLY, structured_output=False)
def get_body(id: int) -> str:
    """One note's body, as plain text."""
    return next(n["body"] for n in NOTES if n["id"] == id)


@mcp.tool(annotations=READ_ONLY)
def fail(message: str) -> str:
    """Always fails with `message`."""
    raise ToolError(message)


@mcp.tool(annotations=READ_ONLY)
def pid() -> int:
    """The server's process id (changes when it is restarted)."""
    return os.getpid()


@mcp.tool(annotations=READ_ONLY)
def environment() -> list[str]:
    """The names of the server's environment variables."""
    return sorted(os.environ)


@mcp.tool(annotations=READ_ONLY)
def crash() -> str:
    """Kills the server process mid-call."""
    os._exit(3)


@mcp.tool(annotations=READ_ONLY)
async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    await asyncio.sleep(seconds)
    return "done"


@mcp.tool(annotations=WRITES)
def delete_note(id: int, ctx: Context) -> dict:
    """Deletes a note (not read-only: callable from programs only with the user's approval).
    Says which note, and the idempotency key and trace context ptc-engine sent in the call's
    `_meta`."""
    meta = ctx.request_context.meta
    extra = meta if isinstance(meta, dict) else (getattr(meta, "model_extra", None) or {})
    return {"deleted": id, "key": extra.get("ptc-engine/idempotency-key"), "trace": extra.get("traceparent")}


def shout(text: str) -> str:
    """Upper-cases `text` (added at run time by enable_shout)."""
    return text.upper()


@mcp.tool(annotations=READ_ONLY)
async def enable_shout(ctx: Context) -> str:
    """Adds the `shout` tool and tells clients the tool list changed."""
    mcp.add_tool(shout, annotations=READ_ONLY)
    await ctx.session.send_tool_list_changed()
    return "enabled"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run()
