"""JSON responses rendered by orjson (the stdlib encoder starlette uses is several times
slower on a turn's response object, which every create returns)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


class JsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
