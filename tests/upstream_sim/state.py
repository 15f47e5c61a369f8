"""The simulator's configuration and shared state: queue, recordings, prefix cache.

The server runs on its own event loop thread while tests read and push from the test
thread, so every mutable field is guarded by one lock, and waiters use a condition on
that lock.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .behaviors import Behavior
from .kv_events import KvEventPublisher
from .prefix_cache import PrefixCache

Outcome = Literal[
    "rejected",  # validation error, no generation
    "completed",
    "incomplete",  # stopped by the output token limit
    "failed",  # a pushed Fail
    "error_event",  # a pushed StreamError
    "malformed",  # a pushed Malformed: a 200 answer that is not a valid response
    "disconnected",  # the simulator closed the connection (Disconnect)
    "aborted",  # the client went away before the response was complete
    "shutdown",  # the simulator stopped while the request was hanging
]


@dataclass(frozen=True)
class SimConfig:
    """Everything a test may want to vary. Immutable: build a new server to change it."""

    model: str = "sim-model"
    block_size: int = 16
    # Whether /metrics states the cache config (``vllm:cache_config_info``, its block
    # size): a router in front, or an engine build without it, does not.
    reports_block_size: bool = True
    # Whether that line also states the cache's size (``num_gpu_blocks``, as vLLM 0.32
    # does): the capacity ``cache_capacity_blocks`` sets. Off by default, so the
    # keep-warm tests' capacity bound stays out of their way.
    reports_kv_capacity: bool = False
    # What /v1/responses reports as ``cache_write_tokens``: the prompt's full blocks it
    # stored (vLLM 0.32-0.34), every uncached prompt token (an engine counting otherwise),
    # or nothing (the field left out).
    cache_write_report: Literal["full_blocks", "uncached", "absent"] = "full_blocks"
    max_model_len: int = 32768
    # Name reported in the ``x-upstream-replica`` response header (benchmarks).
    replica: str | None = None
    # LRU capacity of the prefix cache in blocks (None: unbounded).
    cache_capacity_blocks: int | None = None
    # vLLM only reports chat ``prompt_tokens_details`` with --enable-prompt-tokens-details.
    enable_prompt_tokens_details: bool = True
    # Tokens per text/arguments/reasoning delta event.
    tokens_per_delta: int = 1
    # Default reply when the queue is empty: echo_prefix + the last user (or tool)
    # text, cut to echo_max_tokens; or, with default_reply_tokens, exactly that many
    # tokens (padded with deterministic filler words).
    echo_prefix: str = "echo: "
    echo_max_tokens: int = 32
    default_reply_tokens: int | None = None
    # vLLM 0.32 ends an incomplete stream with "response.completed" (carrying status
    # "incomplete"); OpenAI sends "response.incomplete". Pick which to imitate.
    incomplete_event: Literal["response.incomplete", "response.completed"] = "response.incomplete"
    # Latency model for benchmarks: prefill cost per *uncached* prompt token, decode
    # cost per generated token (added to each stream event / to a JSON reply).
    prefill_seconds_per_token: float = 0.0
    decode_seconds_per_token: float = 0.0
    # The sampling a request that leaves it open gets (vLLM: the model's generation
    # config), reported in every response object.
    default_temperature: float = 1.0
    default_top_p: float = 1.0
    # Whether ``enable_response_messages`` returns token ids (vLLM >= 0.32 does; an older
    # or another server ignores the field and answers null).
    response_messages: bool = True
    # The chat template renders a replayed function call as an empty assistant message
    # (SmolLM2's renders only ``content``, dropping ``tool_calls``).
    template_drops_tool_calls: bool = False
    # vLLM's ``--enable-scale-out``: the render endpoints answer (else 403).
    enable_scale_out: bool = False
    # What /v1/models reports as the model's ``root`` (vLLM: the path it was loaded from).
    model_root: str | None = None
    # Keep only the latest so many requests (None: all). Benchmarks bound it: thousands of
    # kept request bodies (parsed JSON) made the simulator's own garbage collection pause
    # for ~60 ms, delaying whichever requests were in flight.
    max_recordings: int | None = None
    # Publish vLLM-shaped KV events on this ZMQ endpoint (ipc:// is bound, tcp://host:p
    # connected to, as vLLM does); the topic names the replica.
    kv_events_endpoint: str | None = None
    kv_events_topic: str = ""
    # vLLM's ``--api-key``: every /v1 route answers 401 ``{"error": "Unauthorized"}`` to a
    # request without ``Authorization: Bearer <api_key>``.
    api_key: str | None = None


class Headers(Mapping[str, str]):
    """Case-insensitive, read-only view of request headers (repeats joined by ', ')."""

    def __init__(self, raw: Iterable[tuple[str, str]]) -> None:
        self.raw: tuple[tuple[str, str], ...] = tuple(raw)
        merged: dict[str, str] = {}
        for name, value in self.raw:
            key = name.lower()
            merged[key] = f"{merged[key]}, {value}" if key in merged else value
        self._merged = merged

    def __getitem__(self, key: str) -> str:
        return self._merged[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._merged

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged)

    def __len__(self) -> int:
        return len(self._merged)

    def get_all(self, key: str) -> list[str]:
        wanted = key.lower()
        return [v for k, v in self.raw if k.lower() == wanted]

    def __repr__(self) -> str:
        return f"Headers({self._merged!r})"


@dataclass
class RecordedRequest:
    """One request as received, plus what the simulator made of it.

    The first block of fields is fixed at arrival; the rest are filled in while the
    request is served (read them after the response, or through ``SimServer.wait_for``).
    """

    index: int
    method: str
    path: str
    query: str
    headers: Headers
    body: bytes
    json: Any
    time: float
    client: tuple[str, int] | None

    behavior: Behavior | None = None
    stream: bool = False
    status: int | None = None
    outcome: Outcome | None = None
    aborted: bool = False
    finished_at: float | None = None
    prompt_text: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    response_id: str | None = None
    events_sent: int = 0

    @property
    def done(self) -> bool:
        return self.outcome is not None


class SimState:
    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.queue: deque[Behavior] = deque()
        # Behaviors for one agent of a multi-agent tree only (``push_for``).
        self.agent_queues: dict[str, deque[Behavior]] = {}
        self.recordings: list[RecordedRequest] = []
        self.recorded = 0
        self.calls: Counter[str] = Counter()
        self.aborted: list[RecordedRequest] = []
        self.cache = PrefixCache(self.config.block_size, self.config.cache_capacity_blocks)
        # What /metrics reports as requests waiting and KV cache usage (0..1): scripted
        # by tests of the gateway's pressure bound, since the simulator has no scheduler.
        self.load: tuple[float, float] = (0.0, 0.0)
        self.kv_publisher: KvEventPublisher | None = None
        if self.config.kv_events_endpoint is not None:
            self.kv_publisher = KvEventPublisher(
                self.config.kv_events_endpoint, self.config.kv_events_topic
            )
            self.cache.journal = []

    # --- test-facing --------------------------------------------------------------

    def push(self, *behaviors: Behavior) -> None:
        with self.lock:
            self.queue.extend(behaviors)

    def push_for(self, agent: str, *behaviors: Behavior) -> None:
        """Behaviors taken only by requests of ``agent``: requests whose
        ``vllm_xargs.agentic_context`` names it as ``agent_id`` (the gateway's agents of
        a multi-agent tree run concurrently, so one FIFO cannot script them)."""
        with self.lock:
            self.agent_queues.setdefault(agent, deque()).extend(behaviors)

    def pending(self) -> int:
        with self.lock:
            return len(self.queue) + sum(len(q) for q in self.agent_queues.values())

    def requests(self, path: str | None = None) -> list[RecordedRequest]:
        with self.lock:
            return [r for r in self.recordings if path is None or r.path == path]

    def reset(self) -> None:
        """Forget queue, recordings, counters and cache; keep the configuration."""
        with self.lock:
            self.queue.clear()
            self.agent_queues.clear()
            self.recordings.clear()
            self.recorded = 0
            self.calls.clear()
            self.aborted.clear()
            self.cache.clear()
            self.load = (0.0, 0.0)
            self._publish_kv_events()
            self.changed.notify_all()

    def clear_recordings(self) -> None:
        with self.lock:
            self.recordings.clear()
            self.recorded = 0
            self.calls.clear()
            self.aborted.clear()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
        """Block the calling (test) thread until ``predicate()`` holds; False on timeout.

        The predicate runs under the state lock, so it may read recordings freely.
        """
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
            return True

    # --- server-facing ------------------------------------------------------------

    def record(
        self,
        *,
        method: str,
        path: str,
        query: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        parsed: Any,
        client: tuple[str, int] | None,
    ) -> RecordedRequest:
        with self.lock:
            rec = RecordedRequest(
                index=self.recorded,
                method=method,
                path=path,
                query=query,
                headers=Headers(headers),
                body=body,
                json=parsed,
                time=time.time(),
                client=client,
            )
            self.recorded += 1
            self.recordings.append(rec)
            limit = self.config.max_recordings
            if limit is not None and len(self.recordings) > limit:
                del self.recordings[: len(self.recordings) - limit]
            self.calls[path] += 1
            self.changed.notify_all()
            return rec

    def next_behavior(self, body: Any = None) -> Behavior | None:
        with self.lock:
            queue = self.agent_queues.get(agent_of(body) or "")
            if queue:
                return queue.popleft()
            return self.queue.popleft() if self.queue else None

    def update(self, rec: RecordedRequest, **changes: Any) -> None:
        with self.lock:
            for name, value in changes.items():
                setattr(rec, name, value)
            self.changed.notify_all()

    def finish(self, rec: RecordedRequest, outcome: Outcome, *, status: int | None = None) -> None:
        with self.lock:
            if rec.outcome is not None:
                return
            rec.outcome = outcome
            rec.finished_at = time.time()
            if status is not None:
                rec.status = status
            if outcome == "aborted":
                rec.aborted = True
                self.aborted.append(rec)
            self.changed.notify_all()

    def cache_lookup_and_fill(
        self,
        tokens: list[int],
        salt: str | None,
        session_id: str | None = None,
        report_reuse: bool = False,
    ) -> int:
        """Prefill: report the cached prefix, then hold the whole prompt's blocks."""
        with self.lock:
            cached = self.cache.lookup(
                tokens, salt, session_id=session_id, report_reuse=report_reuse
            )
            self.cache.insert(tokens, salt, session_id=session_id)
            self._publish_kv_events()
            return cached

    def cache_insert(
        self, tokens: list[int], salt: str | None, session_id: str | None = None
    ) -> None:
        with self.lock:
            self.cache.insert(tokens, salt, session_id=session_id)
            self._publish_kv_events()

    def cache_clear(self) -> None:
        """vLLM's /reset_prefix_cache: every block dropped, AllBlocksCleared published."""
        with self.lock:
            self.cache.clear()
            self._publish_kv_events()

    def _publish_kv_events(self) -> None:
        journal = self.cache.journal
        if self.kv_publisher is not None and journal:
            self.kv_publisher.publish(list(journal))
        if journal is not None:
            journal.clear()

    def close(self) -> None:
        with self.lock:
            if self.kv_publisher is not None:
                self.kv_publisher.close()
                self.kv_publisher = None


def agent_of(body: Any) -> str | None:
    """The agent a request names in ``vllm_xargs.agentic_context`` (a JSON string)."""
    xargs = body.get("vllm_xargs") if isinstance(body, dict) else None
    context = xargs.get("agentic_context") if isinstance(xargs, dict) else None
    if not isinstance(context, str):
        return None
    try:
        agent = json.loads(context).get("agent_id")
    except (ValueError, AttributeError):
        return None
    return agent if isinstance(agent, str) else None
