"""MCP servers the gateway lists and calls on the model's behalf: request specs and
redaction, the host allow-list, the client, and tools as functions."""
