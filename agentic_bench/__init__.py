"""``agentic-api bench``: measure prefix-cache reuse and server overhead of a deployment."""
