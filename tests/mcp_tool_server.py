"""A small MCP server (official SDK, `MCPServer`, stdio) that the McpServers tests start.

    python tests/mcp_tool_server.py             # serve the tools below
    python tests/mcp_tool_server.py --fail      # print a reason on stderr and exit 3
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent, TextContent

if "--fail" in sys.argv:
    print("tool server: cannot start: TOKEN is not set", file=sys.stderr, flush=True)
    sys.exit(3)

server = MCPServer("test-tools")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def pid() -> int:
    """The server's process id (tells a restarted server from the first one)."""
    return os.getpid()


@server.tool()
def crash() -> str:
    """Exit in the middle of the call, as a crashing server would."""
    print("tool server: crashing on purpose", file=sys.stderr, flush=True)
    os._exit(7)


@server.tool()
async def hang() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def fail(reason: str) -> str:
    """Fail with `reason` (a ToolError: its text reaches the caller as an isError result)."""
    raise ToolError(reason)


@server.tool(name="render.chart", structured_output=False)
def chart() -> list[TextContent | ImageContent]:
    """Text and an image."""
    return [TextContent(text="chart of 3 points"),
            ImageContent(data="iVBORw0KGgo=", mime_type="image/png")]


if __name__ == "__main__":
    server.run()
