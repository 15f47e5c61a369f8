"""A lineage tree as a flat run of rows for the template: a chain of single
continuations stays in one list and only a fork opens a nested one, so a 500-turn
chain is 500 list items, not 500 nested lists (or 500 nested template calls, which
would exhaust Python's recursion limit)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentic_api.operator.shapes.admin import LineageNode


@dataclass(frozen=True)
class TreeRow:
    kind: Literal["open", "node", "close"]
    node: LineageNode | None = None


def tree_rows(top: list[LineageNode]) -> list[TreeRow]:
    rows: list[TreeRow] = [TreeRow("open")]
    # Each entry: the siblings still to show at one nesting level.
    stack: list[list[LineageNode]] = [list(reversed(top))]
    while stack:
        pending = stack[-1]
        if not pending:
            stack.pop()
            rows.append(TreeRow("close"))
            continue
        node = pending.pop()
        rows.append(TreeRow("node", node))
        if len(node.children) == 1:
            pending.append(node.children[0])
        elif node.children:
            rows.append(TreeRow("open"))
            stack.append(list(reversed(node.children)))
    return rows
