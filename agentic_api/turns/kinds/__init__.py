"""The kinds of turn, each its upstream rounds on ``turns/runner/``, returning how it
ended for ``turns/runner/finish.py:end_turn``: the plain turn (``plain.py``, one round),
the tool loop (``tool_loop.py``, ``tool_events.py``) and compaction (``compaction.py``);
and the requests that use a prepared turn without running it: its input tokens counted
(``input_tokens.py``) and ``POST /v1/responses/compact`` (``compaction.py:compact``)."""
