"""Charts as SVG text, drawn by pygal on the server: the benchmark reports and the operator
console draw the same way, and neither needs a browser library.

Plain functions: give them series, get back an SVG document (a ``str``):

- ``line_chart``: lines with markers over a numeric x (each series has its own x values);
- ``bar_chart``: one group of bars per category, one bar per series (``stacked``: one bar
  per category, the series stacked in it);
- ``stack_vertically``: several of those charts as one SVG, one above the other.

What comes out references nothing outside itself and runs no code: pygal's scripts (its
tooltip library, an inline config script) and its hidden tooltip box (the one inline
``style`` attribute) are removed, and each point carries a native ``<title>`` tooltip
instead, so a chart works offline and under a Content-Security-Policy with no script at
all. Its styling is a ``<style>`` element inside the SVG: served as an image
(``<img src>``, ``image/svg+xml``) it needs nothing from the page's policy; pasted inline
into HTML it needs the page to allow that style.

Every string (titles, series names, categories) becomes XML text or an attribute value
through the XML serializer, so it is escaped: labels may be caller-supplied. Missing values
(``None`` or NaN) leave a gap. The same input gives the same bytes (the chart's id is a
hash of what it draws; pygal's dated comments are removed), so regenerated charts diff
cleanly and two identical charts on one page share their id harmlessly.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from xml.etree import ElementTree as ET

import pygal
from pygal.style import Style

# pygal appends to sys.meta_path a finder for its map plugins (unused here) that has only
# the find_module of Python < 3.4: every import that fails anywhere after it then also warns
# ImportWarning, an error under strict warning filters. Taken out again.
sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, pygal.PluginImportFixer)]

SVG_NS = "http://www.w3.org/2000/svg"
_PLACEHOLDER_ID = "drawing"
WIDTH = 800
_MARGIN = 20  # pygal's default around the drawing
_LEGEND_COLUMNS = 3
_LEGEND_ROW = 20  # pixels a row of legend takes at the style's 12 px legend font
ET.register_namespace("", SVG_NS)
ET.register_namespace("xlink", "http://www.w3.org/1999/xlink")

_STYLE = Style(
    font_family="Helvetica, Arial, sans-serif",
    background="white",
    plot_background="white",
    title_font_size=15,
    legend_font_size=12,
    label_font_size=11,
    major_label_font_size=11,
    guide_stroke_color="#cccccc",
    major_guide_stroke_color="#999999",
    colors=("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"),
)


def line_chart(
    title: str,
    series: Mapping[str, Sequence[tuple[float, float | None]]],
    *,
    x_title: str = "",
    y_title: str = "",
    y_range: tuple[float, float] | None = None,
    from_zero: bool = True,
    height: int = 360,
) -> str:
    """Each series a line through its (x, y) points, sorted by x, with a marker on each.
    The y axis starts at 0 unless ``from_zero`` is false or ``y_range`` fixes it."""
    chart = pygal.XY(**_config(title, x_title, y_title, y_range, from_zero, height, len(series)))
    chart.x_value_formatter = _number
    for name, points in series.items():
        chart.add(name, sorted(((float(x), _value(y)) for x, y in points), key=_x))
    return _render(chart, list(series))


def bar_chart(
    title: str,
    categories: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    stacked: bool = False,
    x_title: str = "",
    y_title: str = "",
    y_range: tuple[float, float] | None = None,
    height: int = 360,
) -> str:
    """Along x one place per category; a series gives one value per category, in the
    categories' order. Grouped: one bar per series in each place; ``stacked``: one bar per
    category, the series' values stacked in it (first series at the bottom)."""
    for name, values in series.items():
        if len(values) != len(categories):
            raise ValueError(
                f"series {name!r} has {len(values)} values for {len(categories)} categories"
            )
    kind = pygal.StackedBar if stacked else pygal.Bar
    chart = kind(**_config(title, x_title, y_title, y_range, True, height, len(series)))
    chart.x_labels = list(categories)
    cleaned = [[_value(v) for v in given] for given in series.values()]
    for name, drawn in zip(series, cleaned, strict=True):
        chart.add(name, drawn)
    return _render(chart, list(series), cleaned)


def stack_vertically(title: str, charts: Sequence[str]) -> str:
    """The charts (SVG documents from this module) one above the other in one SVG document,
    under a title: a figure of panels that share a subject."""
    top = 34
    root = ET.Element(f"{{{SVG_NS}}}svg")
    heading = ET.SubElement(
        root,
        f"{{{SVG_NS}}}text",
        {
            "x": str(WIDTH / 2),
            "y": "22",
            "text-anchor": "middle",
            "font-family": str(_STYLE.font_family),
            "font-size": "17",
        },
    )
    heading.text = title
    y = top
    for text in charts:
        panel = ET.fromstring(text)
        _, _, width, height = (float(part) for part in panel.get("viewBox", "").split())
        panel.set("y", str(y))
        panel.set("width", _number(width))
        panel.set("height", _number(height))
        root.append(panel)
        y += int(height)
    root.set("viewBox", f"0 0 {WIDTH} {y}")
    root.set("width", str(WIDTH))
    root.set("height", str(y))
    return _serialize(root)


def _config(
    title: str,
    x_title: str,
    y_title: str,
    y_range: tuple[float, float] | None,
    from_zero: bool,
    height: int,
    series_count: int,
) -> dict[str, Any]:
    # pygal reserves series // columns legend rows under the plot (none for fewer series
    # than columns) where ceil(series / columns) are drawn: the margin makes up the rest.
    columns = max(1, min(_LEGEND_COLUMNS, series_count))
    missing_rows = -(-series_count // columns) - series_count // columns
    return {
        "title": title,
        "x_title": x_title or None,
        "y_title": y_title or None,
        "range": y_range,
        "include_x_axis": from_zero and y_range is None,
        "width": WIDTH,
        "height": height,
        "style": _STYLE,
        # No <script href>: pygal would otherwise load its tooltip library from the web.
        "js": [],
        "legend_at_bottom": True,
        "legend_at_bottom_columns": columns,
        "margin_bottom": _MARGIN + missing_rows * _LEGEND_ROW,
        "truncate_legend": -1,
        "truncate_label": -1,
        "value_formatter": _number,
        "dots_size": 2.5,
        "print_values": False,
        "max_scale": 8,  # at most about 8 ticks on an axis: readable at 360 px
        # A missing value breaks the line instead of joining its neighbours across it.
        "allow_interruptions": True,
    }


def _render(
    chart: Any, names: Sequence[str], bar_values: Sequence[Sequence[float | None]] = ()
) -> str:
    chart.uuid = _PLACEHOLDER_ID
    # Parsed back from pygal's text: its tree names tags with or without the SVG namespace
    # depending on whether lxml is installed; parsed, they always carry it.
    root = ET.fromstring(chart.render(is_unicode=True))
    _keep_drawing_only(root)
    _drop_missing_bars(root, bar_values)
    _add_point_titles(root, names)
    _name_by_content(root)
    return _serialize(root)


def _name_by_content(root: ET.Element) -> None:
    """The id scopes the chart's CSS; pygal draws it at random, a hash of the drawing keeps
    the output stable (set in the two places pygal writes it, never in the chart's text)."""
    chart_id = f"chart-{hashlib.sha256(_serialize(root).encode()).hexdigest()[:16]}"
    root.set("id", chart_id)
    for style in root.iter(f"{{{SVG_NS}}}style"):
        style.text = (style.text or "").replace(f"chart-{_PLACEHOLDER_ID}", chart_id)


def _keep_drawing_only(root: ET.Element) -> None:
    """Removes what runs code or is there for pygal's script: every <script>, the tooltip
    box it would fill, and the comments (they carry the day of rendering)."""
    for parent in list(root.iter()):
        for child in list(parent):
            if (
                child.tag is ET.Comment  # type: ignore[comparison-overlap]  # typeshed: tag is str
                or child.tag == f"{{{SVG_NS}}}script"
                or "tooltip-overlay" in child.get("class", "").split()
            ):
                parent.remove(child)
            elif child.get("id", "").startswith("activate-serie"):
                del child.attrib["id"]  # a handle for the script, repeated in every chart


def _drop_missing_bars(root: ET.Element, values: Sequence[Sequence[float | None]]) -> None:
    """Stacked bars draw a missing value as a bar of height 0 (its tooltip would say 0):
    removed, so a missing value shows as nothing. (Grouped bars leave them out already.)"""
    for index, group in _series_groups(root, len(values)):
        for bars in group.findall(f"{{{SVG_NS}}}g[@class='bars']"):
            drawn = bars.findall(f"{{{SVG_NS}}}g[@class='bar']")
            if len(drawn) != len(values[index]):
                continue  # one drawn per value present, so none stands for a missing one
            for bar, value in zip(drawn, values[index], strict=True):
                if value is None:
                    bars.remove(bar)


def _series_groups(root: ET.Element, count: int) -> Iterator[tuple[int, ET.Element]]:
    """Each group of class "series serie-N" (pygal's group of one series' marks) with its
    N, for the first ``count`` series."""
    for group in root.iter(f"{{{SVG_NS}}}g"):
        match = re.search(r"\bserie-(\d+)\b", group.get("class", ""))
        if match is not None and int(match.group(1)) < count:
            yield int(match.group(1)), group


def _add_point_titles(root: ET.Element, names: Sequence[str]) -> None:
    """A <title> on each point's group ("series: value"), the browser's own tooltip."""
    for index, group in _series_groups(root, len(names)):
        for point in group.iter(f"{{{SVG_NS}}}g"):
            value = point.find(f"{{{SVG_NS}}}desc[@class='value']")
            if value is not None and point.find(f"{{{SVG_NS}}}title") is None:
                tip = ET.SubElement(point, f"{{{SVG_NS}}}title")
                tip.text = f"{names[index]}: {value.text or ''}"


def _serialize(root: ET.Element) -> str:
    return ET.tostring(root, encoding="unicode") + "\n"


def _x(point: tuple[float, float | None]) -> float:
    return point[0]


def _value(value: float | None) -> float | None:
    if value is None or math.isnan(value) or math.isinf(value):
        return None
    return float(value)


def _number(value: float) -> str:
    """Short numbers for axes and tooltips: 1234, 12.5, 0.125."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3f}".rstrip("0").rstrip(".")
