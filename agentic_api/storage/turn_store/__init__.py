"""The hand-tuned hot path: a turn's checkpoint read and its insert (``store``), the
statements both implementations share (``statements``), and the SQLite and PostgreSQL
implementations."""

from agentic_api.storage.turn_store.store import SessionTurnStore, TurnStore, open_turn_store

__all__ = ["SessionTurnStore", "TurnStore", "open_turn_store"]
