"""Benchmark of the KV-event subscriber and the residency map (docs/benchmarks/kv_events/README.md).

    .venv/bin/python scripts/bench/residency.py [--sessions 10000] [--blocks 64] [--turns 20000]

1. ``map``: decode + apply, in this thread, of a steady stream of turns against a map
   already holding ``--sessions`` sessions of ``--blocks`` blocks each: every turn stores
   ``--new-blocks`` new blocks under its session (one batch) and the cache evicts as many
   blocks of another session (one removal event per block, as vLLM sends them). Reported
   per CPU second of this one thread: batches, events and block hashes.
2. ``zmq``: the same batches published on an ipc:// PUB socket and consumed by the real
   subscriber thread; wall time until the last one is applied, and the process CPU.
3. ``full``: a turn under ``kv_cache_report_mode: full`` also re-reports its reused
   prefix (``--prefix-blocks``) as stored: the cost of one such batch.
4. ``hooks``: the per-turn hooks the serving process runs (turn_started/turn_finished).

``--predict URL`` (docs/benchmarks/residency/): against our server in front of a real
vLLM with a small KV cache and KV events, whether residency predicts the hit or miss of
the next continuation, for forked branches of one session and for sessions that start on
a shared prefix, with random other traffic evicting between turns. Before each
continuation it reads the parent's residency (the branch: its own prompt + output's
leading resident tokens; the session: its tally), then compares with the measured
``cached_tokens`` and the turn's token account's ``expected_cached``.

Timings use ``time.thread_time`` / ``process_time`` (CPU, not wall) so a busy shared
machine inflates them less.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import msgpack
import zmq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentic_api.cache.residency.endpoints import Endpoint  # noqa: E402
from agentic_api.cache.residency.events import decode_frames  # noqa: E402
from agentic_api.cache.residency.subscriber import KvEventSubscriber  # noqa: E402
from agentic_api.cache.residency.tracker import ResidencyTracker  # noqa: E402

REPLICA = "bench"


def stored(hashes: list[int], block: int, session: str, parent: int | None) -> dict[str, object]:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": list(range(len(hashes) * block)),
        "block_size": block,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": [["salt"] if parent is None else None] + [None] * (len(hashes) - 1),
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",
        "session_id": session,
    }


def removed(block_hash: int) -> dict[str, object]:
    return {"type": "BlockRemoved", "block_hashes": [block_hash], "medium": "GPU", "group_idx": 0}


def frames(seq: int, events: list[dict[str, object]]) -> list[bytes]:
    return [b"kv", seq.to_bytes(8, "big"), msgpack.packb([time.time(), events, 0])]


class Workload:
    """Sessions with ``blocks`` each; every turn adds new blocks to a random session and
    evicts as many of the oldest-stored blocks (another session's)."""

    def __init__(self, sessions: int, blocks: int, block: int, seed: int = 7) -> None:
        self.random = random.Random(seed)
        self.block = block
        self.next_hash = 1
        self.sessions = [f"conv_{i:08x}" for i in range(sessions)]
        self.blocks = blocks
        self.live: deque[int] = deque()  # oldest first

    def fill(self) -> Iterator[dict[str, object]]:
        # One session at a time, so the measured memory is the map's, not the events'.
        for session in self.sessions:
            yield self._store(session, self.blocks)

    def _store(self, session: str, count: int) -> dict[str, object]:
        hashes = list(range(self.next_hash, self.next_hash + count))
        self.next_hash += count
        self.live.extend(hashes)
        return stored(hashes, self.block, session, None)

    def turn(self, new_blocks: int) -> list[dict[str, object]]:
        session = self.random.choice(self.sessions)
        events: list[dict[str, object]] = [
            removed(self.live.popleft()) for _ in range(min(new_blocks, len(self.live)))
        ]
        events.append(self._store(session, new_blocks))
        return events


def rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096 / 2**20


def populated(args: argparse.Namespace) -> tuple[ResidencyTracker, Workload, int]:
    tracker = ResidencyTracker(
        [REPLICA], max_sessions=args.sessions * 2, max_blocks_per_session=4096
    )
    work = Workload(args.sessions, args.blocks, args.block)
    seq = 0
    for event in work.fill():
        tracker.apply(REPLICA, decode_frames(frames(seq, [event])))
        seq += 1
    return tracker, work, seq


def bench_map(args: argparse.Namespace) -> dict[str, float]:
    before = rss_mb()
    tracker, work, seq = populated(args)
    # Includes the workload's deque of live hashes (~8 bytes each).
    grown = rss_mb() - before
    batches = [frames(seq + i, work.turn(args.new_blocks)) for i in range(args.turns)]
    events = sum(len(msgpack.unpackb(f[2])[1]) for f in batches)
    hashes = events + args.turns * (args.new_blocks - 1)
    start = time.thread_time()
    for message in batches:
        tracker.apply(REPLICA, decode_frames(message))
    cpu = time.thread_time() - start
    return {
        "sessions": args.sessions,
        "resident_blocks": len(work.live),
        "rss_mb_for_the_filled_map": round(grown, 1),
        "rss_bytes_per_resident_block": round(grown * 2**20 / len(work.live)),
        "batches_per_cpu_second": round(args.turns / cpu),
        "events_per_cpu_second": round(events / cpu),
        "hashes_per_cpu_second": round(hashes / cpu),
        "cpu_us_per_turn_batch": round(cpu / args.turns * 1e6, 1),
    }


def bench_zmq(args: argparse.Namespace) -> dict[str, float]:
    tracker, work, seq = populated(args)
    folder = tempfile.mkdtemp(prefix="kvb-")
    endpoint = f"ipc://{folder}/bench.ipc"
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.bind(endpoint)
    subscriber = KvEventSubscriber(
        tracker, [Endpoint(REPLICA, endpoint, "connect")], queue_messages=args.turns + 10
    )
    subscriber.start()
    subscriber.ready.wait(5)
    time.sleep(0.5)  # the subscription must reach the publisher before we send
    batches = [frames(seq + i, work.turn(args.new_blocks)) for i in range(args.turns)]
    last = seq + args.turns - 1
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for message in batches:
        pub.send_multipart(message)
    deadline = time.monotonic() + 120
    while tracker.last_sequence(REPLICA) != last and time.monotonic() < deadline:
        time.sleep(0.001)
    if tracker.last_sequence(REPLICA) != last:
        raise SystemExit("the subscriber did not receive every batch")
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    subscriber.stop()
    pub.close(linger=0)
    context.term()
    return {
        "batches": args.turns,
        "wall_seconds": round(wall, 3),
        "batches_per_second": round(args.turns / wall),
        "process_cpu_seconds": round(cpu, 3),
        "batches_per_cpu_second": round(args.turns / cpu),
    }


def bench_full(args: argparse.Namespace) -> dict[str, float]:
    tracker, work, seq = populated(args)
    rounds = max(1, args.turns // 10)
    batches = []
    for i in range(rounds):
        session = work.random.choice(work.sessions)
        prefix = list(range(10**9 + i * args.prefix_blocks, 10**9 + (i + 1) * args.prefix_blocks))
        batches.append(frames(seq + i, [stored(prefix, args.block, session, None)]))
    start = time.thread_time()
    for message in batches:
        tracker.apply(REPLICA, decode_frames(message))
    cpu = time.thread_time() - start
    return {
        "prefix_blocks": args.prefix_blocks,
        "cpu_us_per_reported_prefix": round(cpu / rounds * 1e6, 1),
        "cpu_us_per_reported_block": round(cpu / rounds / args.prefix_blocks * 1e6, 3),
    }


def bench_hooks(args: argparse.Namespace) -> dict[str, float]:
    tracker, work, _seq = populated(args)
    sessions = work.sessions
    start = time.thread_time()
    for i in range(args.turns):
        session = sessions[i % len(sessions)]
        tracker.turn_started(session)
        tracker.turn_finished(session)
    cpu = time.thread_time() - start
    return {"cpu_us_per_turn": round(cpu / args.turns * 1e6, 2)}


def bench_vllm(url: str, endpoint: str, turns: int) -> dict[str, dict[str, float]]:
    """Events a real vLLM sends for one chain of continuations, in each report mode."""
    import httpx

    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    time.sleep(0.5)
    client = httpx.Client(base_url=url, timeout=120)
    out: dict[str, dict[str, float]] = {}
    for mode in ("incremental", "full"):
        history: list[dict[str, object]] = []
        events = hashes = prompt = cached = 0
        for turn in range(turns):
            words = " ".join(f"{mode[0]}{turn}w{i}" for i in range(25))
            history.append({"type": "message", "role": "user", "content": words})
            body: dict[str, object] = {
                "model": "tiny-llama",
                "store": False,
                "input": history,
                "max_output_tokens": 1,
                "temperature": 0,
                "session_id": f"bench-{mode}",
            }
            if mode == "full":
                body["vllm_xargs"] = {"kv_cache_report_mode": "full"}
            answer = client.post("/v1/responses", json=body).json()
            prompt += answer["usage"]["input_tokens"]
            cached += answer["usage"]["input_tokens_details"]["cached_tokens"]
            while sub.poll(500):
                payload = msgpack.unpackb(sub.recv_multipart()[2], strict_map_key=False)
                for event in payload[1]:
                    events += 1
                    hashes += len(event.get("block_hashes", ()))
        out[mode] = {
            "turns": turns,
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "events": events,
            "block_hashes": hashes,
        }
    sub.close(linger=0)
    context.term()
    return out


class Predictions:
    """Our server (and its admin view) in front of one replica; one row per continuation."""

    def __init__(self, url: str, key: str, admin_key: str, replica: str, seed: int) -> None:
        import httpx

        self.http = httpx.Client(base_url=url, timeout=300)
        self.key = {"Authorization": f"Bearer {key}"}
        self.admin = {"Authorization": f"Bearer {admin_key}"}
        self.replica = replica
        self.random = random.Random(seed)
        self.rows: list[dict[str, object]] = []
        self.noise = 0

    def create(self, text: str, **fields: object) -> dict[str, object]:
        body = {"model": "tiny-llama", "input": text, "temperature": 0, "max_output_tokens": 4}
        answer = self.http.post("/v1/responses", json={**body, **fields}, headers=self.key)
        answer.raise_for_status()
        return dict(answer.json())

    def words(self, tag: str, count: int) -> str:
        return tag + " " + " ".join(f"w{self.random.randrange(400)}" for _ in range(count))

    def pressure(self) -> None:
        """Other agents' turns, 0 to ~4,000 tokens of new blocks (~3 tokens a word) against
        a 2,048-token cache: evicts nothing, some, or all of the rest."""
        for _ in range(self.random.choice((0, 0, 1, 2, 3, 4, 5))):
            self.noise += 1
            self.create(self.words(f"noise{self.noise}", self.random.randrange(100, 280)))

    def residency(self, response_id: str) -> tuple[int, int]:
        """(branch, session) resident tokens of the response on our replica."""
        time.sleep(0.3)  # the last engine step's events are on their way
        view = self.http.get(
            f"/admin/v1/responses/{response_id}/residency", headers=self.admin
        ).json()
        session = next(r for r in view["replicas"] if r["replica"] == self.replica)
        branch = next(r for r in view["branch"]["replicas"] if r["replica"] == self.replica)
        return int(branch["resident_tokens"]), int(session["resident_tokens"])

    def continue_(self, scenario: str, parent: str, text: str, **fields: object) -> str:
        branch, session = self.residency(parent)
        made = self.create(text, **fields)
        usage = made["usage"]
        assert isinstance(usage, dict)
        measured = int(usage["input_tokens_details"]["cached_tokens"])
        account = self.http.get(
            f"/admin/v1/responses/{made['id']}/token_account", headers=self.admin
        ).json()["account"]
        if account is None or account.get("expected_cached") is None:
            raise SystemExit(f"no token account for {made['id']}: {account}")
        expected = int(account["expected_cached"])
        hit = measured >= expected
        self.rows.append(
            {
                "scenario": scenario,
                "expected": expected,
                "measured": measured,
                "branch_resident": branch,
                "session_resident": session,
                "hit": hit,
                "branch_predicts": (branch >= expected) == hit,
                "branch_exact": min(branch, expected) == min(measured, expected),
                "session_predicts": (session >= expected) == hit,
            }
        )
        return str(made["id"])

    def forks(self, rounds: int) -> None:
        """A session's trunk, forked twice; other traffic between turns; each branch
        continued once (in random order), then each continuation once more."""
        for r in range(rounds):
            trunk = str(self.create(self.words(f"trunk{r}", 60))["id"])
            tips = [
                str(self.create(self.words(f"b{r}{side}", 40), previous_response_id=trunk)["id"])
                for side in "lr"
            ]
            for _ in range(2):
                self.pressure()
                order = list(range(len(tips)))
                self.random.shuffle(order)
                for i in order:
                    tips[i] = self.continue_(
                        "forks", tips[i], self.words(f"c{r}{i}", 12), previous_response_id=tips[i]
                    )

    def shared(self, rounds: int, sessions: int) -> None:
        """Conversations whose first turn starts on one shared document (instructions),
        each continued twice with other traffic in between."""
        for r in range(rounds):
            document = self.words(f"doc{r}", 70)
            heads: list[tuple[str, str]] = []
            for i in range(sessions):
                conversation = self.http.post(
                    "/v1/conversations", json={}, headers=self.key
                ).json()["id"]
                made = self.create(
                    self.words(f"q{r}{i}", 15), instructions=document, conversation=conversation
                )
                heads.append((conversation, str(made["id"])))
            for _ in range(2):
                self.pressure()
                for i, (conversation, head) in enumerate(heads):
                    heads[i] = (
                        conversation,
                        self.continue_(
                            "shared_prefix",
                            head,
                            self.words(f"n{r}{i}", 10),
                            instructions=document,
                            conversation=conversation,
                        ),
                    )

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for scenario in ("forks", "shared_prefix"):
            rows = [row for row in self.rows if row["scenario"] == scenario]
            out[scenario] = {
                "continuations": len(rows),
                "hits": sum(1 for row in rows if row["hit"]),
                "misses": sum(1 for row in rows if not row["hit"]),
                "branch_predicts_hit_or_miss": sum(1 for row in rows if row["branch_predicts"]),
                "branch_predicts_cached_tokens": sum(1 for row in rows if row["branch_exact"]),
                "session_tally_predicts_hit_or_miss": sum(
                    1 for row in rows if row["session_predicts"]
                ),
            }
        return out


def bench_predict(args: argparse.Namespace) -> dict[str, object]:
    run = Predictions(args.predict, args.api_key, args.admin_key, args.replica, args.seed)
    run.forks(args.rounds)
    run.shared(args.rounds, args.sessions_sharing)
    # What the replica sent to get there (our server's counters, this run only).
    events = {
        line.split("{")[0] + "{" + line.split("{")[1].split("}")[0] + "}": float(line.split()[-1])
        for line in run.http.get("/metrics").text.splitlines()
        if line.startswith(("agentic_kv_events_total", "agentic_kv_event_batches_total"))
    }
    return {"summary": {**run.summary(), "kv_events": events}, "rows": run.rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--blocks", type=int, default=64, help="blocks per session at the start")
    ap.add_argument("--block", type=int, default=16, help="tokens per block (vLLM GPU default)")
    ap.add_argument("--new-blocks", type=int, default=4, help="new blocks stored per turn")
    ap.add_argument("--prefix-blocks", type=int, default=500, help="reused blocks (full mode)")
    ap.add_argument("--turns", type=int, default=20_000)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--vllm", help="a tiny vLLM's URL, to count its events per report mode")
    ap.add_argument("--endpoint", help="that vLLM's KV-event endpoint (ipc://)")
    ap.add_argument("--vllm-turns", type=int, default=12)
    ap.add_argument("--predict", help="our server's URL (in front of a real vLLM)")
    ap.add_argument("--api-key", help="a tenant's key (--predict)")
    ap.add_argument("--admin-key", help="an admin key (--predict)")
    ap.add_argument("--replica", default="replica-a", help="the replica's name (--predict)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds per scenario (--predict)")
    ap.add_argument("--sessions-sharing", type=int, default=3, help="(--predict)")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args(argv)
    if args.predict:
        result = bench_predict(args)
        print(json.dumps(result["summary"], indent=2))
        if args.out:
            args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        return 0
    if args.vllm:
        print(json.dumps(bench_vllm(args.vllm, args.endpoint, args.vllm_turns), indent=2))
        return 0
    result = {
        "map": bench_map(args),
        "zmq": bench_zmq(args),
        "full": bench_full(args),
        "hooks": bench_hooks(args),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
