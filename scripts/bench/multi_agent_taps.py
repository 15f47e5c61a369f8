"""Which replica served each multi-agent tree, from the replicas' taps
(``agents_tap.py`` logs, for ``scripts/bench/multi_agent.sh`` with two replicas).

Every agent of a tree sends the root's session (body ``session_id``), so a session is a
lead and all its subagents over every turn. Prints JSON: requests per replica, and per
session the requests each replica served; ``sessions_on_one_replica`` counts the sessions
whose every request went to one replica (where a subagent's first request can find its
parent's prefix).

    python scripts/bench/multi_agent_taps.py TAP1.jsonl TAP2.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict
from pathlib import Path


def main(paths: list[str]) -> int:
    per_replica: Counter[str] = Counter()
    per_session: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            replica = str(record["replica"])
            per_replica[replica] += 1
            per_session[str(record.get("session"))][replica] += 1
    summary = {
        "requests_per_replica": dict(sorted(per_replica.items())),
        "sessions": len(per_session),
        "sessions_on_one_replica": sum(1 for c in per_session.values() if len(c) == 1),
        "per_session": {s: dict(sorted(c.items())) for s, c in sorted(per_session.items())},
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
