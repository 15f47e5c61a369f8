"""One Responses turn, by phase, each package using only those listed after it:

- ``run.py``: the entry points (a turn run to its end; ``TurnStream``, a streamed turn's
  handle);
- ``prewarm.py``, ``without_commit/``: entry points that prepare a turn and commit
  nothing (a prewarm; its input tokens counted; its history compacted);
- ``kinds/``: what a turn does upstream: the plain turn (one round), the tool loop,
  compaction;
- ``runner/``: what every kind runs on: the turn in progress, the upstream round and its
  failure rule, the relay, the channel to a streaming client, token truth, and the end
  (commit, terminal event, or the stored failure);
- ``prepare/``: everything before the model is called: lineage, the verified history
  (stored, kept in process, a conversation's, a WebSocket connection's), approvals, the
  rendered upstream request;
- ``data/``: what a turn is, as values every phase shares: the caller, the prepared turn,
  commit hooks, the token plan.

The import-linter contract in pyproject.toml holds that order.
"""
