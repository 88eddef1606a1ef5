"""Tool handlers: argument checking and the sub-session tools."""
