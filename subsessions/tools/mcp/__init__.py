"""MCP servers as a tool source (the optional `[mcp]` extra for the SDK; a config is checked
without it): `config` reads `[mcp_servers.NAME]`, `link` holds one live connection, `client`
offers each server's tools to sessions as `mcp__{server}__{tool}`."""
