"""Gateway-run tools: MCP servers the gateway lists and calls on the model's behalf."""
