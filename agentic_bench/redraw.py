"""``agentic-api bench chart``: a kept run's SVG drawn again from the files it wrote (its
JSON, and the CSV beside it where the JSON holds no rows), with the current chart code.

Which benchmark wrote a JSON is told by what it holds: ``depths`` (overhead), ``rounds``
(streaming), ``config`` (agents), ``prompt_words`` (continuations, affinity).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from agentic_bench import agents_report, continuations, overhead, streaming


class UnknownRun(ValueError):
    """The JSON is not one a bench command writes."""


def chart_of(json_path: Path) -> str:
    """The SVG the bench command that wrote ``json_path`` would draw for it now."""
    name = json_path.stem
    result: dict[str, Any] = json.loads(json_path.read_text(encoding="utf-8"))
    if "depths" in result and "results" in result:
        return overhead.chart(result["results"], result["baseline"], f"bench overhead: {name}")
    if "rounds" in result:
        return streaming.chart(result["rounds"], f"bench streaming: {name}")
    if "config" in result:
        _, rows = agents_report.load_run(json_path)
        label = result.get("label") or name
        return agents_report.run_chart(rows, f"bench agents: {label}")
    if "prompt_words" in result:
        rows = _numbers(json_path.with_suffix(".csv"))
        return continuations.chart(rows, f"bench continuations: {name}")
    raise UnknownRun("not the JSON of a bench overhead, streaming, agents or continuations run")


def redraw(json_path: Path) -> Path:
    """Writes the run's chart over NAME.svg beside its JSON; returns that path."""
    svg = chart_of(json_path)
    path = json_path.with_suffix(".svg")
    path.write_text(svg, encoding="utf-8")
    return path


def _numbers(path: Path) -> list[dict[str, Any]]:
    """A continuations CSV with its numbers as numbers again (empty cells are None)."""
    with path.open(encoding="utf-8", newline="") as handle:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def _number(cell: str) -> Any:
    if cell == "":
        return None
    for kind in (int, float):
        try:
            return kind(cell)
        except ValueError:
            pass
    return cell
