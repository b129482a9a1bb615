"""Captures the tool lists in this directory from the real servers (`python capture.py`);
runtime-python-wasm/python/tests/test_signatures.py and benches/signatures/tokens.py read them.

The servers, pinned (`npm install` them into ./node_modules first):
    @modelcontextprotocol/server-filesystem@2026.8.31  @modelcontextprotocol/server-everything@2026.8.31
    @modelcontextprotocol/server-github@2025.4.8  @playwright/mcp@0.0.83  @notionhq/notion-mcp-server@2.5.2
Needs the MCP Python SDK (`pip install mcp==2.3.0`). Tokens are dummies: listing needs none.
Each file keeps what a client gives a model: name, description, inputSchema, annotations.
"""

import asyncio
import json
import os

from mcp import Client, StdioServerParameters

BIN = os.path.join("node_modules", ".bin")
SERVERS = {
    "filesystem": ("mcp-server-filesystem", ["/tmp"], {}),
    "everything": ("mcp-server-everything", [], {}),
    "github": ("mcp-server-github", [], {"GITHUB_PERSONAL_ACCESS_TOKEN": "x"}),
    "playwright": ("playwright-mcp", ["--headless"], {}),
    "notion": ("notion-mcp-server", [], {"NOTION_TOKEN": "x"}),
}
KEEP = ("name", "description", "inputSchema", "annotations")


async def capture(name, command, args, env):
    params = StdioServerParameters(command=os.path.join(BIN, command), args=args, env={**os.environ, **env})
    tools, cursor = [], None
    async with Client(params) as client:
        while True:
            page = await (client.list_tools(cursor=cursor) if cursor else client.list_tools())
            tools += [t.model_dump(by_alias=True, exclude_none=True) for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
    with open(f"{name}.json", "w") as f:
        json.dump([{k: t[k] for k in KEEP if k in t} for t in tools], f, separators=(",", ":"))
    print(name, len(tools))


async def main():
    for name, (command, args, env) in SERVERS.items():
        await capture(name, command, args, env)


asyncio.run(main())
