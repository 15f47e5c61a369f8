"""Transport only: routes, auth, SSE framing, WebSocket sessions, error rendering."""
