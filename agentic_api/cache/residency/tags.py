"""What each upstream request carries so the replica's KV events name our session.

vLLM labels ``BlockStored`` with the body ``session_id``, else the ``X-Session-ID``
header. The header is always sent (``lineage.headers``), but a router may drop it before
the replica (vllm-router does); a body field travels with the body. The body value also
wins over whatever ``session_id`` a client passed through.

``report_reuse`` asks vLLM (``vllm_xargs.kv_cache_report_mode: "full"``) to report blocks
a request *reused* as stored under its session too, so a session that starts on another
session's cached prefix is shown holding it. It costs one re-reported hash per reused
block per request (docs/benchmarks/kv_events/README.md), so it is off by default: branch
residency (``tree.py``) finds shared blocks without it (docs/benchmarks/residency/).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SessionTags:
    in_body: bool = True
    report_reuse: bool = False

    def apply(self, fields: dict[str, Any], session_id: str) -> None:
        if self.in_body:
            fields["session_id"] = session_id
        if self.report_reuse:
            given = fields.get("vllm_xargs")
            xargs = dict(given) if isinstance(given, dict) else {}
            xargs["kv_cache_report_mode"] = "full"
            fields["vllm_xargs"] = xargs
