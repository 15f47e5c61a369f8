"""The Anthropic Messages API turn: stateless, the client's body forwarded to the
upstream's own ``/v1/messages`` with the tenant's salt and the session's routing headers
(``turn.py``), streamed through a task of its own (``stream.py``), its outcome counted
and optionally recorded (``outcome.py``). It is not a Responses turn: it shares only the
caller with ``turns/``."""
