"""What the console's tests write into stored turns: a tool the turns offer, and text
that would run script or load a resource if a page showed it as markup (the HTTP tests
look for it in the HTML, the browser test runs the page)."""

from __future__ import annotations

from openai.types.responses import FunctionToolParam

LOOKUP_TOOL: FunctionToolParam = {
    "type": "function",
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    "strict": False,
}
MARKUP_PAYLOADS = (
    "<script>window.__xss = 1</script>",
    '"><img src=x onerror="window.__xss=2">',
    "javascript:window.__xss=3",
    "<svg onload=\"window.__xss=4\"><script>alert('svg')</script></svg>",
    "' onmouseover='window.__xss=5",
)
