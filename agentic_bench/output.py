"""Writing benchmark results: CSV rows, a JSON summary and an SVG chart (drawn by each
benchmark with ``agentic_api.charts``, the server's chart helpers)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: _cell(row.get(key)) for key in columns})


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else round(value, 6)
    return "" if value is None else value


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(data), indent=2) + "\n", encoding="utf-8")


def write_results(
    out: Path,
    name: str,
    rows: Sequence[Mapping[str, Any]],
    summary: Any,
    svg: str,
    *,
    more_rows: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[Path]:
    """A bench run's files: NAME.csv (``rows``), NAME_SUFFIX.csv for each of
    ``more_rows``, NAME.json (``summary``) and NAME.svg; returns their paths, in that order."""
    paths = [out / f"{name}.csv"]
    write_csv(paths[0], rows)
    for suffix, extra in (more_rows or {}).items():
        paths.append(out / f"{name}_{suffix}.csv")
        write_csv(paths[-1], extra)
    paths += [out / f"{name}.json", out / f"{name}.svg"]
    write_json(paths[-2], summary)
    paths[-1].write_text(svg, encoding="utf-8")
    return paths


def _clean(value: Any) -> Any:
    """JSON has no NaN: missing measurements become null; floats are rounded for diffs."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 6)
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
