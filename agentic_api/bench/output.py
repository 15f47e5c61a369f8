"""Writing benchmark results: CSV rows, a JSON summary and SVG charts (no dependencies)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")


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


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    bars: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    y_label: str
    series: Sequence[Series]
    y_min: float | None = 0.0
    y_max: float | None = None


def svg_chart(
    panels: Sequence[Panel], *, title: str, x_label: str, width: int = 760, panel_height: int = 260
) -> str:
    """Stacked panels sharing an x axis: lines with markers, or bars."""
    left, right, top, gap, bottom = 70, 150, 40, 50, 45
    plot_w = width - left - right
    height = top + len(panels) * (panel_height + gap) - gap + bottom
    xs = [x for panel in panels for s in panel.series for x, _ in s.points]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    pad = (x_hi - x_lo) * 0.03
    x_lo, x_hi = x_lo - pad, x_hi + pad
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
    ]
    color_of: dict[str, str] = {}
    for index, panel in enumerate(panels):
        y0 = top + index * (panel_height + gap)
        ys = [y for s in panel.series for _, y in s.points if not math.isnan(y)]
        y_lo = panel.y_min if panel.y_min is not None else (min(ys) if ys else 0.0)
        y_hi = panel.y_max if panel.y_max is not None else (max(ys) * 1.1 if ys else 1.0)
        if y_hi <= y_lo:
            y_hi = y_lo + 1

        def sx(x: float) -> float:
            return left + (x - x_lo) / (x_hi - x_lo) * plot_w

        def sy(y: float, y0: float = y0, y_lo: float = y_lo, y_hi: float = y_hi) -> float:
            return y0 + panel_height - (y - y_lo) / (y_hi - y_lo) * panel_height

        out.append(
            f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel_height}" '
            'fill="none" stroke="#999"/>'
        )
        out.append(f'<text x="{left}" y="{y0 - 6}" font-size="13">{escape(panel.title)}</text>')
        for tick in range(5):
            value = y_lo + (y_hi - y_lo) * tick / 4
            y = sy(value)
            out.append(
                f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>'
            )
            out.append(
                f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(value)}</text>'
            )
        out.append(
            f'<text x="16" y="{y0 + panel_height / 2}" text-anchor="middle" '
            f'transform="rotate(-90 16 {y0 + panel_height / 2})">{escape(panel.y_label)}</text>'
        )
        bar_series = [s for s in panel.series if s.bars]
        for s in panel.series:
            color = color_of.setdefault(s.name, PALETTE[len(color_of) % len(PALETTE)])
            points = [(x, y) for x, y in s.points if not math.isnan(y)]
            if s.bars:
                slot = bar_series.index(s)
                width_x = plot_w / max(len(points), 1) * 0.8 / max(len(bar_series), 1)
                for x, y in points:
                    bx = sx(x) - width_x * len(bar_series) / 2 + slot * width_x
                    top_y = sy(max(min(y, y_hi), y_lo))
                    out.append(
                        f'<rect x="{bx:.1f}" y="{top_y:.1f}" width="{width_x:.1f}" '
                        f'height="{y0 + panel_height - top_y:.1f}" fill="{color}" '
                        f'fill-opacity="0.8"><title>{escape(s.name)} {x:g}: {_fmt(y)}</title>'
                        "</rect>"
                    )
                continue
            if len(points) > 1:
                path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
                out.append(
                    f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>'
                )
            for x, y in points:
                out.append(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                    f"<title>{escape(s.name)} {x:g}: {_fmt(y)}</title></circle>"
                )
    bottom_y = top + len(panels) * (panel_height + gap) - gap
    for x_tick in _x_ticks(x_lo + pad, x_hi - pad):
        tick_x = left + (x_tick - x_lo) / (x_hi - x_lo) * plot_w
        out.append(
            f'<text x="{tick_x:.1f}" y="{bottom_y + 16}" text-anchor="middle">{x_tick:g}</text>'
        )
    out.append(
        f'<text x="{left + plot_w / 2}" y="{bottom_y + 36}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    for row, (name, color) in enumerate(color_of.items()):
        y = top + 10 + row * 18
        out.append(
            f'<rect x="{left + plot_w + 14}" y="{y - 9}" width="12" height="12" fill="{color}"/>'
        )
        out.append(f'<text x="{left + plot_w + 32}" y="{y + 1}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _x_ticks(lo: float, hi: float, count: int = 10) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    value = first
    while value <= hi + 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3f}".rstrip("0").rstrip(".")
