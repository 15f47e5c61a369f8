"""Prometheus metrics: the objects, and the few helpers the pipeline calls to feed them.

One process (``serve`` with one worker, tests): everything lives in prometheus-client's
default registry, so the process and platform collectors come along. Several ``serve``
workers: ``serve`` points ``PROMETHEUS_MULTIPROC_DIR`` at a private directory before they
start, each worker writes its values to files there, and ``exposition()`` merges every
worker's files, so a scrape answers for the whole server whichever worker takes it (the
process and platform collectors do not exist in that mode). Counters and histograms are
summed over workers, dead ones included; each gauge says how it combines (its
``multiprocess_mode``). Everything is exposed by ``GET /metrics``. Label sets stay bounded:
routes are templates (``/v1/responses/{response_id}``), tenants are ids (and only when
``AGENTIC_METRICS_TENANT_LABELS`` turns them on: ``label_tenants``), models are the
names clients send (the upstream refuses unknown ones, and a refused turn is counted
under ``status="rejected"``), and ``api`` is the API a turn came through: ``responses``
or ``messages`` (Anthropic's).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
DB_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
RATIO_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
ITEM_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)

HTTP_REQUESTS = Counter(
    "agentic_http_requests_total",
    "HTTP requests by method, route template and status (websocket: status 101).",
    ["method", "route", "status"],
)
HTTP_DURATION = Histogram(
    "agentic_http_request_duration_seconds",
    "Time from receiving a request to the end of its response (streams included).",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)
TURNS = Counter(
    "agentic_turns_total",
    "Turns by final status: completed, incomplete, failed (stored as failed), rejected "
    "(the upstream refused it before streaming; nothing stored), error (commit failed), "
    "cancelled (a Messages stream whose client left).",
    ["api", "model", "status"],
)
UPSTREAM_DURATION = Histogram(
    "agentic_upstream_duration_seconds",
    "From sending a turn upstream to the end of its stream.",
    ["api", "model"],
    buckets=LATENCY_BUCKETS,
)
TIME_TO_FIRST_TOKEN = Histogram(
    "agentic_time_to_first_token_seconds",
    "From sending a turn upstream to its first output delta.",
    ["api", "model"],
    buckets=LATENCY_BUCKETS,
)
COMMIT_DURATION = Histogram(
    "agentic_turn_commit_seconds",
    "Database time of a turn's commit (its one write transaction).",
    buckets=DB_BUCKETS,
)
DB_TRANSACTION_DURATION = Histogram(
    "agentic_db_transaction_seconds",
    "Duration of each unit of work, by kind (read: e.g. a rehydration; write: e.g. a commit).",
    ["kind"],
    buckets=DB_BUCKETS,
)
DB_STATEMENTS = Counter(
    "agentic_db_statements_total",
    "SQL statements sent to the database (round trips).",
)
INPUT_TOKENS = Counter(
    "agentic_input_tokens_total",
    "Prompt tokens of completed turns (for Messages: input, cache read and cache creation "
    "tokens together, the whole prompt).",
    ["api", "model", "tenant"],
)
CACHED_TOKENS = Counter(
    "agentic_cached_tokens_total",
    "Prompt tokens the upstream served from its prefix cache.",
    ["api", "model", "tenant"],
)
OUTPUT_TOKENS = Counter(
    "agentic_output_tokens_total",
    "Generated tokens of completed turns.",
    ["api", "model", "tenant"],
)
CACHE_HIT_RATIO = Histogram(
    "agentic_cache_hit_ratio",
    "Per turn: cached_tokens / input_tokens.",
    ["api", "model", "tenant"],
    buckets=RATIO_BUCKETS,
)
REHYDRATED_ITEMS = Histogram(
    "agentic_rehydrated_items",
    "History items rebuilt from storage for a turn (0 for a chain's root).",
    buckets=ITEM_BUCKETS,
)
HISTORY_CACHE_LOOKUPS = Counter(
    "agentic_history_cache_lookups_total",
    "Continuations whose parent's history was found verified in this process (hit) or "
    "was read from storage (miss); of the misses, those that read only the turns after an "
    "ancestor kept here (extended).",
    ["result"],
)
# In-flight counts are each worker's own: the server's is their sum over live workers.
STREAMS_IN_FLIGHT = Gauge(
    "agentic_streams_in_flight", "Streaming turns now running.", multiprocess_mode="livesum"
)
BACKGROUND_TASKS = Gauge(
    "agentic_background_tasks",
    "Turns running detached from their request (streams a client may leave); drained on shutdown.",
    multiprocess_mode="livesum",
)
# One queue in the database that every worker polls: each sees the same depth at a
# different moment, so summing would count it once per worker; the newest reading wins.
BACKGROUND_QUEUE_DEPTH = Gauge(
    "agentic_background_queue_depth",
    "Background jobs waiting for a worker, as this server's workers last saw when polling.",
    multiprocess_mode="livemostrecent",
)
BACKGROUND_RECOVERED = Counter(
    "agentic_background_recovered_total",
    "Jobs whose worker vanished (lease expired): requeued (never reached the model) or "
    "failed with worker_lost.",
    ["action"],
)
RETENTION_PRUNED = Counter(
    "agentic_retention_pruned_total",
    "Rows deleted by retention (AGENTIC_RETENTION_DAYS), by kind: responses (each with "
    "its items, events, token ids and job), conversations (with their items and "
    "responses), message_turns.",
    ["kind"],
)

TOKEN_ACCOUNTS = Counter(
    "agentic_token_accounts_total",
    "Stored turns with a token-level reuse account, by status: exact (the parent's prompt "
    "and output are a token prefix), diverged, cold_start (no parent), unknown (token "
    "data missing or unusable).",
    ["model", "tenant", "status"],
)
REUSABLE_TOKENS = Counter(
    "agentic_token_reusable_tokens_total",
    "Continuations: tokens of the parent's prompt + output that this prompt repeats "
    "exactly (longest common token prefix).",
    ["model", "tenant"],
)
EXPECTED_CACHED_TOKENS = Counter(
    "agentic_token_expected_cached_tokens_total",
    "Continuations: cached tokens vLLM should report (full blocks of the reusable prefix; "
    "0 when the cache is isolated by another salt or model).",
    ["model", "tenant"],
)
MEASURED_CACHED_TOKENS = Counter(
    "agentic_token_measured_cached_tokens_total",
    "Continuations: cached tokens vLLM reported.",
    ["model", "tenant"],
)
LOST_TOKENS = Counter(
    "agentic_token_lost_tokens_total",
    "Continuations: parent tokens not served from the cache, by cause (retokenization, "
    "template, fingerprint, history_edited, context_compacted, not_resident, partial_block).",
    ["model", "tenant", "cause"],
)


# Whether the ``tenant`` label carries tenant ids. Off, it is empty (which Prometheus reads
# as no label: one series for all tenants): a scrape then tells nobody which tenants exist
# or how much each uses. Set once per process by the app (``label_tenants``).
_tenant_labels = False


def label_tenants(enabled: bool) -> None:
    """Turns tenant ids on the ``tenant`` label on or off (``AGENTIC_METRICS_TENANT_LABELS``)."""
    global _tenant_labels
    _tenant_labels = enabled


def tenant_label(tenant: str) -> str:
    """The ``tenant`` label's value for a tenant: its id, or empty while tenant labels are off."""
    return tenant if _tenant_labels else ""


def _multiprocess_dir() -> Path | None:
    # The variable prometheus-client itself read when it was imported: it decides whether
    # this process's values went to files or stayed in memory.
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return Path(directory) if directory else None


def exposition() -> bytes:
    """The text a scrape gets: this process's registry, or every worker's files merged."""
    directory = _multiprocess_dir()
    if directory is None:
        return generate_latest(REGISTRY)
    _forget_vanished_workers(directory)
    # A fresh registry each time, as prometheus-client prescribes: the collector reads the
    # files as they are now. (Its multiprocess module is untyped.)
    registry = CollectorRegistry()
    registry.register(_EveryWorkersFamilies(directory))
    return generate_latest(registry)


class _EveryWorkersFamilies(Collector):
    """The workers' files merged, then every family of ours that no worker observed yet,
    listed without samples.

    The files only know what some worker observed, so a labelled family (cached tokens,
    token accounts) would be missing until its first turn with several workers, while one
    worker lists it from start-up: an ``absent()`` alert would then depend on the worker
    count."""

    def __init__(self, directory: Path) -> None:
        # Not registered anywhere: this collector asks it. (Its module is untyped.)
        self._files = MultiProcessCollector(None, path=str(directory))  # type: ignore[no-untyped-call]

    def collect(self) -> Iterator[Metric]:
        observed: set[str] = set()
        for family in self._files.collect():  # type: ignore[no-untyped-call]
            observed.add(family.name)
            yield family
        for family in _our_families():
            if family.name not in observed:
                yield family


def _our_families() -> Iterator[Metric]:
    """This module's metric families (the server's own), described: name, help and type."""
    for value in tuple(globals().values()):
        if isinstance(value, Counter | Gauge | Histogram):
            yield from value.describe()


def mark_this_process_dead() -> None:
    """At a worker's shutdown: its live gauges (in flight, residency) stop counting; its
    counters and histograms stay in the totals."""
    directory = _multiprocess_dir()
    if directory is not None:
        _mark_dead(os.getpid(), directory)


def _forget_vanished_workers(directory: Path) -> None:
    # A worker that crashed never marked itself dead, and uvicorn starts a replacement
    # under a new pid: without this its last in-flight counts would stay in the sums.
    pids = {
        int(tail)
        for file in directory.glob("gauge_live*_*.db")
        if (tail := file.stem.rpartition("_")[2]).isdigit()
    }
    for pid in pids:
        if not _alive(pid):
            # Another worker's scrape may be removing the same files right now.
            with contextlib.suppress(FileNotFoundError):
                _mark_dead(pid, directory)


def _mark_dead(pid: int, directory: Path) -> None:
    mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, under another user
        return True
    return True


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    HTTP_REQUESTS.labels(method, route, str(status)).inc()
    HTTP_DURATION.labels(method, route).observe(seconds)


class TurnMeter:
    """Feeds the per-turn metrics from the points the turn pipeline passes through."""

    def __init__(
        self,
        *,
        model: str,
        tenant: str,
        history_items: int,
        streaming: bool,
        api: str = "responses",
    ) -> None:
        self.api = api
        self.model = model
        self.tenant = tenant
        self.streaming = streaming
        self.started = time.perf_counter()
        self._first_token = False
        self._upstream_done = False
        self._finished = False
        if api == "responses":
            # Only Responses turns rebuild a history; Messages clients send theirs.
            REHYDRATED_ITEMS.observe(history_items)
        if streaming:
            STREAMS_IN_FLIGHT.inc()

    def event(self, event: Mapping[str, Any]) -> None:
        """Sees every event relayed to the client; the first delta is the first token."""
        if not self._first_token and str(event.get("type", "")).endswith(".delta"):
            self.first_token()

    def first_token(self) -> None:
        if not self._first_token:
            self._first_token = True
            TIME_TO_FIRST_TOKEN.labels(self.api, self.model).observe(
                time.perf_counter() - self.started
            )

    def upstream_done(self) -> None:
        self._upstream_done = True
        UPSTREAM_DURATION.labels(self.api, self.model).observe(time.perf_counter() - self.started)

    def finished(self, response: dict[str, Any]) -> dict[str, Any]:
        """Records the final Response object (returned unchanged, for ``return``)."""
        status = str(response.get("status"))
        usage = response.get("usage")
        if isinstance(usage, Mapping) and status in ("completed", "incomplete"):
            details = usage.get("input_tokens_details")
            cached = int(details.get("cached_tokens") or 0) if isinstance(details, Mapping) else 0
            self.finished_with(
                status,
                input_tokens=int(usage.get("input_tokens") or 0),
                cached_tokens=cached,
                output_tokens=int(usage.get("output_tokens") or 0),
            )
        else:
            self.finished_with(status)
        return response

    def finished_with(
        self,
        status: str,
        *,
        input_tokens: int | None = None,
        cached_tokens: int = 0,
        output_tokens: int = 0,
    ) -> None:
        """Records how a turn ended and, when it produced usage, its tokens
        (``input_tokens``: the whole prompt, cached tokens included)."""
        self._finished = True
        TURNS.labels(self.api, self.model, status).inc()
        if input_tokens is None:
            return
        labels = (self.api, self.model, tenant_label(self.tenant))
        INPUT_TOKENS.labels(*labels).inc(input_tokens)
        CACHED_TOKENS.labels(*labels).inc(cached_tokens)
        OUTPUT_TOKENS.labels(*labels).inc(output_tokens)
        if input_tokens > 0:
            CACHE_HIT_RATIO.labels(*labels).observe(cached_tokens / input_tokens)

    def close(self) -> None:
        if not self._finished:
            self._finished = True
            status = "error" if self._upstream_done else "rejected"
            TURNS.labels(self.api, self.model, status).inc()
        if self.streaming:
            STREAMS_IN_FLIGHT.dec()


# -- KV residency (cache/residency): what the replicas' KV events said -----------------------

IDLE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200, 86400)

KV_EVENT_BATCHES = Counter(
    "agentic_kv_event_batches_total",
    "KV-event batches received from each replica (one per engine step that changed its cache).",
    ["replica"],
)
# vLLM stamps each batch with its wall clock when it publishes it; the gap to our applying
# it is the subscriber's lag (queued in ZMQ, or behind our own lock), clock skew included.
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
KV_EVENT_LAG = Histogram(
    "agentic_kv_event_lag_seconds",
    "From a replica publishing a KV-event batch (its timestamp) to residency applying it.",
    ["replica"],
    buckets=LAG_BUCKETS,
)
KV_EVENTS = Counter(
    "agentic_kv_events_total",
    "KV events applied, by replica and kind (stored, removed, cleared).",
    ["replica", "kind"],
)
KV_COVERAGE_RESETS = Counter(
    "agentic_kv_coverage_resets_total",
    "Times a replica's residency was dropped whole: cleared (AllBlocksCleared), restart "
    "(sequence went backwards), gap (events were lost), malformed (an unreadable batch), "
    "disconnected (the publisher went away), ejected (placement ejected the replica).",
    ["replica", "reason"],
)
# Every worker subscribes to the same replicas and builds the same map from the same events,
# so a sum would count each block once per worker. A worker that joined late, lost events
# or could not subscribe knows less, never more: the fullest view (the maximum) is the one.
KV_RESIDENT_TOKENS = Gauge(
    "agentic_kv_resident_tokens",
    "Tokens in KV blocks a replica reported stored for our sessions and not yet removed.",
    ["replica"],
    multiprocess_mode="livemax",
)
KV_TRACKED_SESSIONS = Gauge(
    "agentic_kv_tracked_sessions",
    "Sessions whose residency is tracked per replica.",
    ["replica"],
    multiprocess_mode="livemax",
)
KV_RESIDENCY_DROPPED = Counter(
    "agentic_kv_residency_dropped_total",
    "Residency forgotten to stay within the memory bounds: whole sessions (least recently "
    "stored first), blocks of a session past its cap (oldest first) or, as tree_block, "
    "blocks of the replica's block tree past AGENTIC_RESIDENCY_MAX_BLOCKS (oldest first).",
    ["replica", "what"],
)
KV_GRAFTED_BLOCKS = Counter(
    "agentic_kv_grafted_blocks_total",
    "Blocks stored before this process listened, put back in a replica's block tree because "
    "a turn was served them and stored its own blocks under them.",
    ["replica"],
)
KV_UNKNOWN_REMOVALS = Counter(
    "agentic_kv_unknown_removals_total",
    "Removed block hashes no tracked session held (stored before we listened, unattributed, "
    "or forgotten).",
    ["replica"],
)
# A residency answer comes from whichever worker takes the request, so a replica is
# followed only while every worker follows it: one disconnected worker shows as 0.
KV_SUBSCRIBER_CONNECTED = Gauge(
    "agentic_kv_subscriber_connected",
    "1 while the subscription to a replica's KV events has a live connection (with several "
    "workers: in every live worker).",
    ["replica"],
    multiprocess_mode="livemin",
)
KV_SESSIONS_EVICTED_IDLE = Counter(
    "agentic_kv_sessions_evicted_while_idle_total",
    "Evictions of a session's blocks while none of its turns was running.",
    ["replica"],
)
KV_EVICTED_BEFORE_RESUME = Counter(
    "agentic_kv_evicted_before_resume_total",
    "Turns whose session had blocks removed from a replica after its previous turn ended.",
    ["replica"],
)
KEEP_WARM_REWARMS = Counter(
    "agentic_keep_warm_rewarms_total",
    "Re-warms of paused sessions by outcome: paid_off (the next turn came back warm), "
    "wasted (it did not, or never came), cancelled (the agent came back first), failed.",
    ["outcome"],
)
KEEP_WARM_TOKENS = Counter(
    "agentic_keep_warm_tokens_total",
    "Prompt tokens vLLM prefilled for re-warms (input minus cached).",
)
KEEP_WARM_SKIPPED = Counter(
    "agentic_keep_warm_skipped_total",
    "Re-warms not sent, by bound: tenant_budget, budget, pressure (once per pause), ttl "
    "(a paused session forgotten).",
    ["reason"],
)
# -- placement (cache/placement.py): which named replica each upstream round went to ----------

PLACEMENTS = Counter(
    "agentic_placements_total",
    "Upstream rounds placed on a named replica (AGENTIC_UPSTREAM_REPLICAS), by replica and "
    "reason: resident_prefix (it held the longest leading prefix), home (nothing resident: "
    "the replica that served the previous round, else the one with the most KV room), "
    "capacity (the previous replica had no room for the session: moved to one that has), "
    "spill_load (the first choice was saturated), failover (the first failed before any "
    "byte reached the client).",
    ["replica", "reason"],
)
PLACEMENT_RESIDENT_TOKENS = Counter(
    "agentic_placement_resident_tokens_total",
    "Leading prompt tokens the chosen replica held when a round was placed on it (what the "
    "placement won, as the KV events said).",
    ["replica"],
)
REPLICA_EJECTIONS = Counter(
    "agentic_replica_ejections_total",
    "Times a named replica was ejected for a back-off (its residency dropped), by cause: "
    "refused (a round could not connect), health (its /health failed).",
    ["replica", "cause"],
)
KV_IDLE_BEFORE_EVICTED_RESUME = Histogram(
    "agentic_kv_idle_before_evicted_resume_seconds",
    "For those turns: how long the session had been idle (previous turn's end to this start).",
    ["replica"],
    buckets=IDLE_BUCKETS,
)


CACHE_WRITE_CHECKS = Counter(
    "agentic_cache_write_checks_total",
    "Turns whose engine reported its own prefix-cache writes (usage.input_tokens_details."
    "cache_write_tokens), by whether they equal ours (the prompt's full blocks not already "
    "cached): agree, mismatch.",
    ["model", "result"],
)


def record_cache_write(model: str, *, agrees: bool) -> None:
    """Counts one comparison of the engine's cache writes with ours."""
    CACHE_WRITE_CHECKS.labels(model, "agree" if agrees else "mismatch").inc()


def record_token_account(
    model: str,
    tenant: str,
    *,
    status: str,
    reusable: int | None,
    expected: int | None,
    measured: int | None,
    lost: Mapping[str, int],
) -> None:
    """Counts one stored turn's reuse account (``cache/accounting.py``)."""
    tenant = tenant_label(tenant)
    TOKEN_ACCOUNTS.labels(model, tenant, status).inc()
    if status not in ("exact", "diverged"):
        return
    REUSABLE_TOKENS.labels(model, tenant).inc(reusable or 0)
    EXPECTED_CACHED_TOKENS.labels(model, tenant).inc(expected or 0)
    MEASURED_CACHED_TOKENS.labels(model, tenant).inc(measured or 0)
    for cause, tokens in lost.items():
        LOST_TOKENS.labels(model, tenant, cause).inc(tokens)
