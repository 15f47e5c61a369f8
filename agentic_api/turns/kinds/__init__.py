"""The kinds of turn, each its upstream rounds on ``turns/runner/``, returning how it
ended for ``turns/runner/finish.py:end_turn``: the plain turn (``plain.py``, one round),
the tool loop (``tool_loop.py``, ``tool_events.py``), compaction (``compaction.py``) and
compaction when the prompt passes a threshold (``threshold_compaction.py``). Requests
that prepare a turn without committing one are in ``turns/without_commit/``."""
