"""MCP both ways (needs the optional `[mcp]` extra, the official `mcp` SDK).

- `subsessions.mcp.server`: `subsessions mcp`, the sub-session tools served to MCP hosts.
- `subsessions.mcp.client`: `McpServers`, MCP servers' tools offered to sessions as
  `mcp__{server}__{tool}`.
"""
