"""What an SVG chart shows, to compare a chart with the one ``bench chart`` redraws from the
run's files: their numbers are rounded to 6 decimals, so coordinates and even the axis
ticks may differ (a maximum of 5.999999 or 6.0); the titles, the legends and the marks'
tooltips (3 decimals at most) may not."""

from __future__ import annotations

from xml.etree import ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def shown(svg: str) -> tuple[list[str], list[str]]:
    """The chart's words (texts that are not a number: titles, legends), and its marks'
    tooltips ("series: value"), in document order."""
    root = ET.fromstring(svg)
    texts = [t.text or "" for t in root.iter(f"{NS}text") if not _number(t.text or "")]
    tips = [t.text or "" for t in root.iter(f"{NS}title") if ": " in (t.text or "")]
    return texts, tips


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
