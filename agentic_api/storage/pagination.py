"""The one way an item list is paged in SQL: by position, after a cursor's position, in
either order. ``serving/pagination.py`` turns the rows into the list object."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute

Query = TypeVar("Query", bound=Select[Any])


def by_position(
    query: Query,
    position: InstrumentedAttribute[int],
    *,
    after_position: int | None,
    limit: int,
    descending: bool,
) -> Query:
    """``query`` limited to the rows past ``after_position`` in the page's order."""
    if after_position is not None:
        query = query.where(position < after_position if descending else position > after_position)
    return query.order_by(position.desc() if descending else position).limit(limit)
