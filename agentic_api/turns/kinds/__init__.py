"""The kinds of turn, each a sequence of upstream rounds run on ``turns/runner/``: the
tool loop (``tool_loop.py``, ``tool_events.py``) and compaction (``compaction.py``); and
the requests that use a prepared turn without running it: its input tokens counted
(``input_tokens.py``) and ``POST /v1/responses/compact``."""
