"""The tier's figures as Markdown tables, from the JSON files the tests wrote.

python -m tests.scale_out.summary docs/benchmarks/scale_out > summary.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _label_value(labels: str) -> str:
    """``action="requeued"`` -> ``requeued``."""
    return labels.partition("=")[2].strip('"')


def _rows(pairs: list[tuple[str, Any]]) -> list[str]:
    return ["| what | figure |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in pairs)]


def _counts(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def _of(part: Any, whole: Any) -> str:
    return f"{part} of {whole}"


def faults_table(figures: dict[str, Any]) -> list[str]:
    runs = figures["model_runs"]
    jobs = figures["background"]
    residency = figures["residency"]
    retrieval = figures["retrieval"]
    continued = figures["continuation"]
    sessions = residency["load_sessions"]
    recovered = {
        name: ", ".join(f"{_label_value(k)} {int(v)}" for k, v in counts.items())
        for name, counts in jobs["recovered_by_sweep"].items()
        if counts
    }
    load = f"{figures['seconds']:.0f} s, {figures['clients']} keyed clients + bench agents"
    creates = f"{figures['keyed_creates']} ({_counts(figures['by_kind'])})"
    reruns = f"{runs['reruns_after_a_lost_answer']} ({_counts(runs['rerun_causes'])})"
    return _rows(
        [
            ("upstream", figures["upstream"]),
            ("load", load),
            ("faults, seconds into the load", _counts(figures["timeline_seconds"])),
            ("keyed creates (by kind)", creates),
            ("acknowledged", figures["acknowledged"]),
            ("unanswered after retries", figures["unanswered_after_retries"]),
            (
                "failed attempts by kind (retried, same key)",
                _counts(figures["failed_attempts_by_kind"]),
            ),
            ("unhandled 500s (no error code)", figures["error_answers"]["unhandled_500s"]),
            (
                "'stored as failed' answers untrue (nothing stored)",
                _of(
                    len(figures["error_answers"]["untrue"]),
                    figures["error_answers"]["stored_as_failed_claims"],
                ),
            ),
            ("acknowledged, not retrievable on every gateway", len(retrieval["missing"])),
            (
                "gateways disagreeing on a stored response",
                len(retrieval["disagreeing_between_gateways"]),
            ),
            ("stored status other than answered", len(retrieval["status_not_as_answered"])),
            ("continued once more from each acknowledged", continued["continued"]),
            ("continuation failures", len(continued["failures"])),
            ("model runs at the tap (keyed creates)", runs["runs"]),
            ("runs after the client had the key's outcome", runs["runs_after_acknowledgement"]),
            ("reruns no lost answer explains", runs["unexplained_reruns"]),
            ("reruns after a lost answer (its cause)", reruns),
            (
                "deliberate duplicates replayed",
                _of(figures["deliberate_duplicates_replayed"], figures["deliberate_duplicates"]),
            ),
            ("background jobs, final status", _counts(jobs["final_status"])),
            (
                "jobs run by another gateway than enqueued them",
                jobs["ran_on_another_gateway_than_enqueued"],
            ),
            (
                "enqueued via the killed gateway, run by a survivor",
                _of(
                    jobs["enqueued_via_killed_gateway_ran_elsewhere"],
                    jobs["enqueued_via_killed_gateway"],
                ),
            ),
            ("recovered by a survivor's sweep (lease expired)", _counts(recovered)),
            (
                "residency differing, the two gateways never killed",
                _of(len(residency["differing_between_survivors"]), sessions),
            ),
            (
                "residency differing, all three (sessions after restart)",
                _of(len(residency["probe_differing_between_all"]), residency["probe_sessions"]),
            ),
            (
                "residency the restarted gateway lacks (missed events)",
                _of(residency["load_sessions_the_restarted_gateway_sees_otherwise"], sessions),
            ),
            (
                "admin views differing between gateways",
                _of(len(figures["admin"]["differing"]), len(figures["admin"]["compared"])),
            ),
            ("bench agents exit status", figures["bench_agents_exit"]),
            ("test wall time, load and checks (s)", figures["wall_seconds"]),
        ]
    )


def affinity_table(figures: dict[str, Any]) -> list[str]:
    lines = [
        "| balancer | acknowledged | unanswered | served by | history hits "
        "| history read from the database | share read from the database |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("round_robin", "affinity"):
        run = figures[name]
        lookups = run["history_lookups"]
        served = ", ".join(f"{k} {v}" for k, v in sorted(run["served_by"].items()))
        share = run["history_read_from_database_share"]
        lines.append(
            f"| {name.replace('_', ' ')} | {run['acknowledged']} | {run['unanswered']} | {served} "
            f"| {int(lookups['hit'])} | {int(lookups['miss'])} | {share} |"
        )
    return lines


def main() -> None:
    folder = Path(sys.argv[1])
    out: list[str] = []
    if (folder / "faults.json").exists():
        out += [
            "## Faults mid-load",
            "",
            *faults_table(json.loads((folder / "faults.json").read_text())),
            "",
        ]
    if (folder / "affinity.json").exists():
        figures = json.loads((folder / "affinity.json").read_text())
        out += [
            f"## Session affinity at the balancer ({figures['seconds_each']:.0f} s each, "
            "no faults)",
            "",
        ]
        out += [*affinity_table(figures), ""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
