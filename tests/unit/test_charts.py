"""``agentic_api.charts``: pygal's SVG, parsed back with xml.etree, with nothing that runs or
loads from elsewhere, labels escaped, missing values left out."""

from __future__ import annotations

import importlib
import math
import warnings
from xml.etree import ElementTree as ET

import pytest

from agentic_api.charts import bar_chart, line_chart, stack_vertically

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = '</text><script>alert(1)</script><a href="javascript:alert(2)">x</a>'


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text")]


def tooltips(root: ET.Element) -> list[str]:
    """The <title> of each drawn point (the axis guides' titles are bare numbers)."""
    return [t.text or "" for t in root.iter(f"{NS}title") if ": " in (t.text or "")]


def bars(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{NS}rect") if "rect" in r.get("class", "").split()]


def assert_self_contained(svg: str) -> None:
    """No script, no event handler, no inline style attribute, no reference outward."""
    root = ET.fromstring(svg)
    assert "<script" not in svg.lower()
    for element in root.iter():
        assert element.tag != f"{NS}script"
        assert "style" not in element.attrib
        for name, value in element.attrib.items():
            assert not name.lower().startswith("on"), name
            assert "href" not in name, (name, value)
        assert "url(" not in (element.text or "") or element.tag == f"{NS}style"
    for style in root.iter(f"{NS}style"):
        assert "@import" not in (style.text or "")
        assert "//" not in (style.text or "")


def series_lines(root: ET.Element, index: int) -> list[ET.Element]:
    return [
        path
        for group in root.iter(f"{NS}g")
        if f"serie-{index}" in group.get("class", "").split()
        for path in group.iter(f"{NS}path")
        if "line" in path.get("class", "").split()
    ]


def test_line_chart_draws_each_series_and_leaves_missing_points_out() -> None:
    svg = line_chart(
        "p50 latency",
        {
            "ours": [(4, 4.0), (1, 2.0), (2, 3.0), (3, math.nan), (5, 5.0)],
            "peer": [(1, 3.0), (3, None), (5, 6.0)],
        },
        x_title="depth",
        y_title="ms",
    )
    assert_self_contained(svg)
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    assert {"p50 latency", "depth", "ms", "ours", "peer"} <= set(texts(root))
    # Six points have a value: a marker and a tooltip each, none for NaN or None.
    assert len(list(root.iter(f"{NS}circle"))) == 6
    assert sorted(tooltips(root)) == [
        "ours: 1: 2",
        "ours: 2: 3",
        "ours: 4: 4",
        "ours: 5: 5",
        "peer: 1: 3",
        "peer: 5: 6",
    ]
    # A missing value breaks the line: ours is two pieces (1-2 and 4-5), peer's single
    # points on either side of its gap join nothing.
    assert len(series_lines(root, 0)) == 2
    assert series_lines(root, 1) == []


def test_line_chart_joins_the_points_of_a_series_in_x_order() -> None:
    root = ET.fromstring(line_chart("t", {"a": [(2, 1.0), (0, 3.0), (1, 2.0)]}))
    (line,) = series_lines(root, 0)
    numbers = [float(n) for n in line.get("d", "").replace("M", " ").replace("L", " ").split()]
    xs, ys = numbers[0::2], numbers[1::2]
    assert xs == sorted(xs) and len(xs) == 3
    assert ys == sorted(ys)  # y grows downward in SVG: 3, 2, 1 from left to right


def test_bar_chart_heights_follow_the_values_on_one_baseline() -> None:
    svg = bar_chart(
        "hit ratio",
        ["pair 0", "pair 1", "pair 2"],
        {"hit": [0.5, 1.0, None], "ideal": [1.0, 1.0, 1.0]},
        x_title="pair",
        y_title="ratio",
        y_range=(0.0, 1.0),
    )
    assert_self_contained(svg)
    root = ET.fromstring(svg)
    assert {"hit ratio", "ratio", "hit", "ideal", "pair 0", "pair 1", "pair 2"} <= set(texts(root))
    drawn = bars(root)
    assert len(drawn) == 5  # the missing hit of pair 2 is no bar
    heights = sorted(float(b.get("height", "0")) for b in drawn)
    assert heights[0] == pytest.approx(heights[1] / 2)
    assert heights[1:] == pytest.approx([heights[1]] * 4)
    bottoms = {round(float(b.get("y", "0")) + float(b.get("height", "0")), 6) for b in drawn}
    assert len(bottoms) == 1
    assert sorted(tooltips(root)) == [
        "hit: 0.5",
        "hit: 1",
        "ideal: 1",
        "ideal: 1",
        "ideal: 1",
    ]


def test_stacked_bars_stand_on_each_other_and_a_missing_value_draws_nothing() -> None:
    svg = bar_chart("turns", ["a", "b"], {"ok": [1.0, 2.0], "failed": [3.0, None]}, stacked=True)
    assert_self_contained(svg)
    root = ET.fromstring(svg)
    drawn = bars(root)
    assert len(drawn) == 3
    assert sorted(tooltips(root)) == ["failed: 3", "ok: 1", "ok: 2"]
    by_x: dict[str, list[tuple[float, float]]] = {}
    for bar in drawn:
        y, height = float(bar.get("y", "0")), float(bar.get("height", "0"))
        by_x.setdefault(bar.get("x", ""), []).append((y, height))
    stacked = max(by_x.values(), key=len)
    (upper_y, upper_h), (lower_y, lower_h) = sorted(stacked)
    assert upper_y + upper_h == pytest.approx(lower_y)  # failed sits on top of ok
    assert upper_h == pytest.approx(3 * lower_h)


def test_bars_refuse_a_series_that_does_not_match_the_categories() -> None:
    with pytest.raises(ValueError, match="'ok' has 1 values for 2 categories"):
        bar_chart("t", ["a", "b"], {"ok": [1.0]})


def test_hostile_labels_are_text_never_markup() -> None:
    for svg in (
        line_chart(HOSTILE, {HOSTILE: [(1, 1.0)]}, x_title=HOSTILE, y_title=HOSTILE),
        bar_chart(HOSTILE, [HOSTILE], {HOSTILE: [1.0]}, y_title=HOSTILE),
        bar_chart(HOSTILE, [HOSTILE], {HOSTILE: [1.0]}, stacked=True),
    ):
        assert_self_contained(svg)
        root = ET.fromstring(svg)
        assert HOSTILE in texts(root)
        assert not list(root.iter(f"{NS}a"))
        assert "javascript:" not in " ".join(v for e in root.iter() for v in e.attrib.values())


def test_the_same_input_draws_the_same_bytes_and_other_input_another_id() -> None:
    first = bar_chart("t", ["a"], {"x": [1.0]})
    assert first == bar_chart("t", ["a"], {"x": [1.0]})
    other = bar_chart("t", ["a"], {"x": [2.0]})
    ids = {ET.fromstring(svg).get("id") for svg in (first, other)}
    assert len(ids) == 2
    for svg in (first, other):
        chart_id = ET.fromstring(svg).get("id", "")
        style = ET.fromstring(svg).find(f"{NS}defs/{NS}style")
        assert style is not None and f"#{chart_id}" in (style.text or "")
        assert "drawing" not in (style.text or "")


def test_stack_vertically_places_each_chart_below_the_last() -> None:
    panels = [
        line_chart("first", {"a": [(0, 1.0)]}, height=300),
        bar_chart("second", ["x"], {"b": [1.0]}, height=200),
    ]
    svg = stack_vertically("both <panels>", panels)
    assert_self_contained(svg)
    root = ET.fromstring(svg)
    assert texts(root)[0] == "both <panels>"
    nested = root.findall(f"{NS}svg")
    assert [n.get("height") for n in nested] == ["300", "200"]
    first_y, second_y = (float(n.get("y", "0")) for n in nested)
    assert second_y == first_y + 300
    assert root.get("viewBox") == f"0 0 800 {int(second_y) + 200}"
    assert {"first", "second", "a", "b"} <= set(texts(root))


def test_a_failing_import_after_pygal_raises_without_a_warning() -> None:
    # pygal's own import hook would turn this into an ImportWarning (an error here).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("agentic_no_such_module")
