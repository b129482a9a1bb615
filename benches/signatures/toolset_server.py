"""An MCP server (official Python SDK) that lists the tools of a captured tool list
(`runtime-python-wasm/toolsets/NAME.json`) as they are, and answers every call with its
arguments: a stand-in for GitHub's, Notion's, ... servers when what is measured is what a
model reads and what a program finds, not what the tools do.

    python toolset_server.py runtime-python-wasm/toolsets/github.json
"""

import json
import sys

from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp import types

with open(sys.argv[1]) as f:
    TOOLS = [types.Tool(name=t["name"], description=t.get("description"), input_schema=t["inputSchema"])
             for t in json.load(f)]



async def list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):
    text = json.dumps({"tool": params.name, "args": params.arguments})
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("toolset", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    import anyio

    anyio.run(main)
