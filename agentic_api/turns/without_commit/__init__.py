"""Requests that prepare a turn and commit nothing: its input tokens counted
(``input_tokens.py``, ``POST /v1/responses/input_tokens``) and its history compacted
(``compact.py``, ``POST /v1/responses/compact``). Not kinds of turn (``turns/kinds/``):
nothing here is stored, streamed or replayed."""
