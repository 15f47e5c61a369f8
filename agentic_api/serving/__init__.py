"""Serving one request that runs or stores a turn: create a response, a WebSocket turn,
an Anthropic message, append conversation items. Each module takes the parsed request
and its caller, runs the durability sequence (an Idempotency-Key's claim, the queue or
the turn, the recorded outcome) and returns what happened; the routes in ``http/`` only
render it. A layer of its own between ``http`` and ``background``: the sequence uses
the queue and the claims, which sit above ``turns`` and so cannot be reached from it."""
