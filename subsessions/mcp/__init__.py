"""`subsessions mcp`: the sub-session tools served to MCP hosts (needs the optional `[mcp]`
extra, the official `mcp` SDK). MCP servers used *by* sessions are a tool source, in
`subsessions.tools.mcp`."""
