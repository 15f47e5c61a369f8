"""Each bench session's keep-warm re-warms as our server's admin lineage shows them: for
every agent, its last turn's ancestors (root first), each with its ``rewarms``.

    python scripts/bench/keep_warm_records.py RUN.csv SERVER_URL ADMIN_KEY > RUN.rewarms.json
"""

from __future__ import annotations

import csv
import json
import sys

import httpx


def main(argv: list[str]) -> int:
    rows_path, url, key = argv
    last: dict[int, tuple[int, str]] = {}
    with open(rows_path, encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["status"] == "error" or not row["response_id"]:
                continue
            agent, turn = int(row["agent"]), int(row["turn"])
            if agent not in last or turn > last[agent][0]:
                last[agent] = (turn, row["response_id"])
    sessions = {}
    with httpx.Client(
        base_url=f"{url}/admin/v1", headers={"Authorization": f"Bearer {key}"}, timeout=20
    ) as admin:
        for agent, (_turn, response_id) in sorted(last.items()):
            lineage = admin.get(f"/responses/{response_id}/lineage").json()
            sessions[f"a{agent}"] = [
                {
                    "turn": index + 1,
                    "response_id": turn["id"],
                    "cached_tokens": turn["usage"]["cached_tokens"],
                    "rewarms": turn["rewarms"],
                }
                for index, turn in enumerate(lineage["ancestors"])
            ]
    json.dump(sessions, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
