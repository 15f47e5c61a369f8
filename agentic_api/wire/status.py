"""The one vocabulary of response statuses and terminal events."""

from __future__ import annotations

TERMINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
TERMINAL_EVENTS = frozenset(f"response.{status}" for status in TERMINAL_STATUSES)
