"""Every knob of the server, read from the environment (prefix ``AGENTIC_``)."""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

SECRET_FILE_NAME = "server_secret"
# The data directory and the embedded database hold every tenant's conversations: this
# user's only.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

# Settings renamed so that "cache" means only the model server's KV cache (an in-process
# reuse of what this server read is a memo). An old name set is a start-up error naming the
# new one, never silently ignored.
RENAMED_ENVIRONMENT = {
    "AGENTIC_HISTORY_CACHE_MB": "AGENTIC_HISTORY_MEMO_MB",
    "AGENTIC_TOKEN_ARTIFACT_CACHE_MB": "AGENTIC_TOKEN_ARTIFACT_MEMO_MB",
    "AGENTIC_MODELS_CACHE_SECONDS": "AGENTIC_MODELS_MEMO_SECONDS",
}


def _default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "agentic-api"


class Settings(BaseSettings):
    """Server configuration. Each field maps to ``AGENTIC_<FIELD>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="AGENTIC_", extra="ignore")

    host: str = Field("127.0.0.1", description="Interface the HTTP server binds to.")
    port: int = Field(8080, ge=0, le=65535, description="TCP port the HTTP server listens on.")
    http_workers: int | Literal["auto"] = Field(
        "auto",
        description="HTTP worker processes `serve` runs (one event loop each, so more use more "
        "cores); they share the database, the secret and the background queue. auto: one per "
        "CPU this process may use, at most 8, and 1 when a KV-event endpoint is bound here "
        "(one process only can hold it). A number is obeyed as given.",
    )
    production: bool = Field(
        False,
        description="Production mode: the server secret must be given explicitly and "
        "the single-tenant mode is refused.",
    )
    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="Folder for the embedded SQLite database and the generated server secret.",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL. Unset: an SQLite file in data_dir. "
        "postgresql://… or postgresql+asyncpg://… selects PostgreSQL through asyncpg.",
    )
    database_pool_size: int = Field(10, ge=1, description="PostgreSQL connection pool size.")
    auto_migrate: bool | None = Field(
        None,
        description="Run migrations when the server starts. Unset: only for SQLite, whose "
        "database is embedded and owned by this process.",
    )
    upstream_base_url: str = Field(
        "http://127.0.0.1:8000",
        description="Base URL of the vLLM server or llm-d router (with or without a /v1 suffix).",
    )
    upstream_replicas: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Named vLLM replicas the gateway places each upstream round on itself "
        "(docs/placement.md), as `name=url` pairs separated by commas (or a JSON object); the "
        "names are the ones in kv_events_endpoints and the replicas' /metrics. Empty: every "
        "round goes to upstream_base_url (one vLLM, or a router that places them).",
    )
    upstream_api_key: SecretStr | None = Field(
        None, description="Bearer token sent to the upstream, if it requires one."
    )
    upstream_connect_timeout: float = Field(
        5.0, gt=0, description="Seconds to wait for a TCP connection to the upstream."
    )
    upstream_read_timeout: float = Field(
        300.0,
        gt=0,
        description="Seconds to wait for the next bytes from the upstream (per read, so long "
        "streams are fine as long as tokens keep coming).",
    )
    history_memo_mb: float = Field(
        64.0,
        ge=0,
        description="Memory for the histories this process just committed or verified, so "
        "continuing them skips re-reading their items (0: always read). Per process.",
    )
    models_memo_seconds: float = Field(
        10.0, ge=0, description="How long the upstream's /v1/models answer is reused."
    )
    token_artifacts: Literal["off", "auto", "required"] = Field(
        "auto",
        description="Record each turn's exact prompt and output token ids and account for "
        "prefix reuse against them: off; auto (when the upstream can tell, detected at "
        "start); required (start-up fails unless the upstream returns token ids).",
    )
    prompt_cache_diagnostics_default: bool = Field(
        False,
        description="Answer prompt_cache_diagnostics for every continuation, against its "
        "parent, even when the client did not ask (prompt_cache_options."
        "comparison_response_id); off, as OpenAI answers only when asked.",
    )
    token_artifact_retention_seconds: float = Field(
        7 * 86400.0,
        gt=0,
        description="How long a turn's token ids are kept (its reuse account stays); a "
        "continuation of an older turn gets an account that says the ids expired.",
    )
    retention_days: float | None = Field(
        None,
        gt=0,
        description="Prune stored responses (with their items, events, token ids and "
        "background job) and recorded Messages turns older than this many days, in "
        "bounded batches by the background sweep; a response something stored still "
        "continues from is kept (docs/retention.md). Unset: kept forever.",
    )
    retention_conversations: bool = Field(
        False,
        description="With retention_days: also prune conversations unchanged for that "
        "long, with their items and responses (off: a conversation keeps its turns).",
    )
    retention_batch_rows: int = Field(
        500,
        ge=1,
        le=10_000,
        description="Rows of each kind one retention transaction deletes at most (each "
        "sweep runs batches until none is full, at most 20).",
    )
    retention_interval_seconds: float = Field(
        300.0,
        gt=0,
        description="How often each process's sweep looks for rows past retention.",
    )
    token_artifact_memo_mb: float = Field(
        32.0,
        ge=0,
        description="Memory for the token ids of turns this process just committed, so "
        "accounting their continuations reads nothing (0: always read). Per process.",
    )
    kv_block_size: int | None = Field(
        None,
        ge=1,
        description="The upstream's KV-cache block size in tokens, for expected cached "
        "tokens. Unset: read from the upstream's /metrics (vLLM's cache_config_info), "
        "else from the block size its KV events carry; never assumed (vLLM's default "
        "changed from 16 to 64 in 0.34): while none is known, token accounts are unknown.",
    )
    server_secret: SecretStr | None = Field(
        None,
        description="Secret from which tenant cache salts are derived (HMAC). Unset outside "
        "production mode: generated once and persisted in data_dir/server_secret.",
    )
    single_tenant: bool = Field(
        False,
        description="Local single-tenant mode: requests without an API key act as the tenant "
        "'local'. Refused on a non-loopback host and in production mode.",
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="Largest accepted request body (after decompression)."
    )
    stream_disconnect: Literal["complete", "cancel"] = Field(
        "complete",
        description="When a streaming client disconnects: finish the turn and store it "
        "(complete), or abort the upstream request and store nothing (cancel).",
    )
    ws_max_connection_seconds: float = Field(
        3600.0,
        gt=0,
        description="Longest a Responses WebSocket stays open; then it is closed with "
        "websocket_connection_limit_reached and the client reconnects.",
    )
    shutdown_grace_seconds: float = Field(
        30.0, ge=0, description="How long shutdown waits for running turns to finish."
    )
    background_workers: int = Field(
        1,
        ge=0,
        description="Background-job workers `serve` runs in its own process (0: none; run "
        "`agentic-api worker` processes instead). Expired jobs are still recovered.",
    )
    background_poll_seconds: float = Field(
        0.5,
        gt=0,
        description="How often an idle worker looks for queued jobs (each empty look doubles "
        "the wait, up to 8 times this; on SQLite a look is skipped while nobody has committed "
        "since the last empty one; a job enqueued in the same process wakes it at once), and "
        "a running job for a cancel made through another process.",
    )
    lease_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a claim (a running background job, an in-progress "
        "Idempotency-Key) stays valid without renewal; its process renews it every third of "
        "this. After that the process is presumed dead and the claim is recovered.",
    )
    idempotency_ttl_seconds: float = Field(
        86400.0,
        gt=0,
        description="How long an Idempotency-Key and its stored outcome are kept; after "
        "that the key is ignored (a retry runs again) and pruned.",
    )
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1"],
        description="Proxies trusted for X-Forwarded-Proto and X-Forwarded-For (uvicorn's "
        "proxy headers), comma-separated or a JSON list: IP addresses, networks "
        "(10.0.0.0/8), or `*` for any peer (only when nothing else can reach the port). A "
        "TLS-terminating proxy must be listed: otherwise requests through it look like "
        "plain HTTP (the console refuses its login form as cross-origin, cookies lose "
        "Secure) and come from the proxy's address (console login limits). Default: "
        "127.0.0.1.",
    )
    mcp_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Host names the gateway may call as MCP servers (`type: mcp` tools), "
        "comma-separated or a JSON list; `*.example.com` matches subdomains, `*` any host. "
        "Matched against the URL's host, not its resolved address. Loopback hosts are "
        "governed by mcp_allow_loopback instead. Empty: MCP tools are refused.",
    )
    mcp_allow_loopback: bool = Field(
        False,
        description="Allow MCP servers on loopback hosts (localhost, 127.0.0.0/8, ::1): for "
        "local development and tests; never expose a gateway with this on.",
    )
    mcp_list_timeout_seconds: float = Field(
        15.0,
        gt=0,
        description="Longest wait for an MCP server to connect and list its tools (once "
        "per server per turn); past it the request fails with 424.",
    )
    mcp_call_timeout_seconds: float = Field(
        60.0,
        gt=0,
        description="Longest one MCP tool call may take; past it the call is recorded as "
        "failed and the model is told so.",
    )
    mcp_max_output_bytes: int = Field(
        64 * 1024,
        gt=0,
        description="Largest MCP tool output (UTF-8 bytes) kept and shown to the model; "
        "longer outputs are cut there and end with a truncation marker.",
    )
    max_tool_rounds: int = Field(
        8,
        ge=1,
        description="Most model rounds (upstream requests) one response may take while the "
        "gateway runs MCP tools between them; a turn that would need more ends incomplete.",
    )
    multi_agent_max_concurrent: int = Field(
        16,
        ge=1,
        description="Highest multi_agent.max_concurrent_subagents a request may ask (the "
        "hosted multi-agent beta, docs/multi_agent.md); more is refused with a 400.",
    )
    multi_agent_max_depth: int = Field(
        3,
        ge=1,
        description="Deepest subagent a multi-agent tree may spawn (the root's children are "
        "depth 1); a spawn_agent past it is answered with an error the model reads.",
    )
    multi_agent_max_agents: int = Field(
        16,
        ge=1,
        description="Most subagents one multi-agent response may create in all; a "
        "spawn_agent past it is answered with an error the model reads.",
    )
    multi_agent_max_seconds: float = Field(
        600.0,
        gt=0,
        description="Wall time one multi-agent response may take, tree included; past it "
        "the response fails with code multi_agent_time_limit and its subagents stop.",
    )
    multi_agent_max_rounds: int = Field(
        16,
        ge=1,
        description="Most model rounds one agent of a multi-agent tree may take per task; "
        "past it the agent stops (a subagent reports it to its parent, the root's "
        "response ends incomplete).",
    )
    messages_record_turns: bool = Field(
        False,
        description="Record each Anthropic Messages API turn (usage and session, never the "
        "messages) for the admin views and cache statistics. Off: Messages traffic is "
        "stateless and nothing of it is stored.",
    )
    kv_events_endpoints: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="KV-event publishers to follow, one per vLLM replica, as "
        "`name=endpoint` pairs separated by commas (or a JSON object). `ipc://path` is "
        "connected to (vLLM binds it); `tcp://127.0.0.1:PORT` is bound here (vLLM, told "
        "that address, connects to it); `connect:` or `bind:` before the address says "
        "which explicitly. Empty: no residency tracking. Each process subscribes once.",
    )
    kv_events_queue_messages: int = Field(
        10_000,
        ge=1,
        description="Event batches queued per replica before ZMQ drops them (then that "
        "replica's residency is dropped whole, rather than risk showing evicted blocks).",
    )
    kv_events_report_reuse: bool = Field(
        False,
        description="Ask vLLM (vllm_xargs kv_cache_report_mode=full) to also report the "
        "blocks each request reused, so a session shows the cached prefix it shares with "
        "another session. Costs one event hash per reused block per request.",
    )
    upstream_session_id_in_body: bool = Field(
        True,
        description="Send the session as a body `session_id` besides the X-Session-ID "
        "header: vLLM labels its KV events with it, and routers that drop the header "
        "(vllm-router) forward the body.",
    )
    residency_max_sessions: int = Field(
        10_000,
        ge=1,
        description="Sessions whose KV residency is kept per replica (least recently stored "
        "forgotten first).",
    )
    residency_max_blocks_per_session: int = Field(
        4096,
        ge=1,
        description="KV blocks kept per session per replica (oldest forgotten first).",
    )
    residency_max_blocks: int = Field(
        1 << 20,
        ge=1,
        description="KV blocks of every session kept per replica in the block tree that "
        "answers a response's own prefix residency (oldest stored forgotten first).",
    )
    residency_evictions_kept: int = Field(
        16, ge=1, description="Evictions remembered per session per replica."
    )
    router_agentic_context: bool = Field(
        False,
        description="Send vllm-router's program-scheduling hints with every upstream request: "
        "vllm_xargs.agentic_context (program and session = our session id, expected_resume "
        "when the request offers tools), derived from our lineage; a client's own value is "
        "always dropped. For vllm-router --enable-program-scheduling.",
    )
    router_kv_retention_ttl_seconds: float | None = Field(
        None,
        ge=0,
        description="With router_agentic_context: how long the router should keep a session "
        "that will resume (kv_retention_ttl_seconds); unset lets the router choose.",
    )
    keep_warm_enabled: bool = Field(
        False,
        description="Keep paused agents warm: when the KV events show that the leading "
        "prefix of a session paused in a function call was evicted, prefill it again "
        "through the prewarm path (same routing coordinates as its next turn), within the "
        "keep_warm_* bounds. Needs kv_events_endpoints.",
    )
    keep_warm_pause_on: Literal["function_call", "tools_offered"] = Field(
        "function_call",
        description="What pauses a session for keep-warm: a turn whose last output is a "
        "function call (the agent is running it), or any completed turn that offered tools "
        "(tool_choice not 'none': the signal vllm-router's expected_resume gets; for agents "
        "whose model answers a tool step in text, as the tiny benchmark model does).",
    )
    keep_warm_when: Literal["evicted", "before_return"] = Field(
        "before_return",
        description="When to re-warm a paused session whose prefix was evicted: "
        "keep_warm_lead_seconds before the agent is expected back, from the median of the "
        "session's own earlier pauses (before_return, the default: a session with no earlier "
        "pause is re-warmed at once), or at once (evicted). The default is the mode that did "
        "not lower the other sessions' hit ratio in docs/benchmarks/keep_warm.",
    )
    keep_warm_lead_seconds: float = Field(
        2.0,
        ge=0,
        description="With keep_warm_when=before_return: how long before the expected "
        "return the re-warm is sent.",
    )
    keep_warm_ttl_seconds: float = Field(
        600.0,
        gt=0,
        description="Never re-warm a session paused longer than this (it is forgotten).",
    )
    keep_warm_tokens_per_minute: int = Field(
        100_000,
        ge=0,
        description="Re-warm tokens (prompt tokens vLLM prefilled for re-warms) per sliding "
        "minute, all tenants together.",
    )
    keep_warm_tenant_tokens_per_minute: int = Field(
        20_000, ge=0, description="Re-warm tokens per sliding minute for one tenant."
    )
    keep_warm_max_rewarms_per_pause: int = Field(
        1,
        ge=1,
        description="Re-warms of one paused session before its agent returns (evicted again "
        "after them, the replica cannot hold every paused session).",
    )
    keep_warm_interval_seconds: float = Field(
        0.5, gt=0, description="How often the keep-warm loop looks for evicted paused sessions."
    )
    keep_warm_replica_metrics: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description="Each replica's vLLM /metrics URL, as `name=url` pairs (names as in "
        "kv_events_endpoints), for the pressure bound: no re-warm while the replica has more "
        "than keep_warm_max_waiting requests waiting or its running requests hold more than "
        "keep_warm_max_kv_usage of its KV cache (or its page cannot be read). A named replica "
        "of upstream_replicas without one here is read at its own URL's /metrics; any other "
        "replica without a URL is re-warmed without that check (each record says so).",
    )
    keep_warm_max_waiting: float = Field(
        0, ge=0, description="Requests waiting on a replica above which it is under pressure."
    )
    keep_warm_max_kv_usage: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Share of a replica's KV cache held by running requests above which it "
        "is under pressure.",
    )
    keep_warm_capacity_share: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Share of a replica's KV cache (its /metrics cache_config_info) that "
        "paused sessions may fill: they are ranked by when they paused, and a session past "
        "that share is not re-warmed (re-warming it would evict one ranked before it). "
        "Applied where keep_warm_replica_metrics names the replica.",
    )
    placement_max_waiting: float = Field(
        2,
        ge=0,
        description="With upstream_replicas: requests waiting on a replica (its /metrics) "
        "above which it is saturated and a round spills to a less loaded one.",
    )
    placement_max_kv_usage: float = Field(
        0.95,
        ge=0,
        le=1,
        description="With upstream_replicas: share of a replica's KV cache held by running "
        "requests above which it is saturated.",
    )
    placement_spill_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="With upstream_replicas: a saturated replica's round spills first to the "
        "least loaded unsaturated replica holding at least this share of the best resident "
        "prefix; with none, to the least loaded replica of all.",
    )
    placement_move_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="With upstream_replicas: a session whose replica (the one holding its "
        "longest prefix) has no KV room for it moves to the replica with the most room when "
        "what it would recompute there is less than this share of its tokens (0: never).",
    )
    placement_probe_seconds: float = Field(
        1.0,
        gt=0,
        description="With upstream_replicas: how often each replica's /health and /metrics "
        "are read (its load for the placement; a failed health check ejects it).",
    )
    placement_eject_seconds: float = Field(
        5.0,
        gt=0,
        description="With upstream_replicas: how long a replica that refused a connection or "
        "failed its health check gets no rounds (doubled for each failure in a row, up to 8 "
        "times this); its residency is dropped.",
    )
    placement_event_lag_seconds: float = Field(
        2.0,
        ge=0,
        description="With upstream_replicas: for this long after a round ended, the replica "
        "that served it is presumed to hold its prompt and output until its KV events say "
        "so (they arrive a little after the answer).",
    )
    placement_claim_seconds: float = Field(
        900.0,
        gt=0,
        description="With upstream_replicas: how long a session keeps its claim on the "
        "replica it was last placed on (the tokens it comes back with, weighed against the "
        "replica's KV size when sessions are placed) after its last round.",
    )
    metrics_enabled: bool = Field(
        True,
        description="Serve Prometheus metrics at GET /metrics (open to anyone who reaches the "
        "port unless metrics_token is set: keep the port internal, set a token, or turn this "
        "off).",
    )
    metrics_token: SecretStr | None = Field(
        None,
        description="When set, GET /metrics answers only requests with 'Authorization: Bearer "
        "<this token>' (a 401 otherwise); Prometheus sends it with its scrape config's "
        "authorization.credentials. Unset: /metrics is open.",
    )
    metrics_tenant_labels: bool = Field(
        False,
        description="Label the per-tenant series (tokens, cache hit ratio, token accounts) with "
        "tenant ids. Off (the default), their tenant label is empty: one series for all "
        "tenants, so a scrape does not list the tenants or what each uses.",
    )
    console_enabled: bool = Field(
        True,
        description="Serve the operator console at /console (it opens only while an admin key "
        "exists, and only to admin keys). Off: /console is a 404.",
    )
    console_login_max_failures: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Failed console logins allowed per client address, and per admin-key "
        "prefix (the characters key lists show), within console_login_window_seconds; "
        "past that, logins from that address or for keys with that prefix are answered 429 "
        "with Retry-After until the oldest failure leaves the window. Counted per HTTP "
        "worker process.",
    )
    console_login_window_seconds: int = Field(
        300,
        ge=1,
        le=24 * 3600,
        description="The sliding window console_login_max_failures counts failed logins in.",
    )
    console_session_seconds: int = Field(
        8 * 3600,
        ge=60,
        le=7 * 24 * 3600,
        description="How long a console login lasts before the admin key must be entered again.",
    )
    log_format: Literal["json", "console"] = Field(
        "json", description="Log rendering: one JSON object per line, or human-readable."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Minimum log level."
    )

    @field_validator("upstream_base_url")
    @classmethod
    def _strip_v1(cls, value: str) -> str:
        value = value.rstrip("/")
        return value.removesuffix("/v1")

    @field_validator("http_workers", mode="before")
    @classmethod
    def _workers_count(cls, value: object) -> object:
        # One clear message for both spellings, instead of one error per union member.
        count = value
        if isinstance(value, str):
            text = value.strip().lower()
            if text == "auto":
                return "auto"
            count = int(text) if text.isascii() and text.isdigit() else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"expected auto or a positive integer, got {value!r}")
        return count

    @field_validator("mcp_allowed_hosts", "forwarded_allow_ips", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        # One env var holds the list: a JSON array or plain comma-separated names.
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator(
        "kv_events_endpoints", "keep_warm_replica_metrics", "upstream_replicas", mode="before"
    )
    @classmethod
    def _split_endpoints(cls, value: object) -> object:
        # One env var: a JSON object, or name=endpoint pairs separated by commas.
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                return json.loads(text)
            pairs: dict[str, str] = {}
            for part in filter(None, (p.strip() for p in text.split(","))):
                name, sep, endpoint = part.partition("=")
                if not sep:
                    raise ValueError(f"expected name=endpoint, got {part!r}")
                pairs[name.strip()] = endpoint.strip()
            return pairs
        return value

    @field_validator("upstream_replicas")
    @classmethod
    def _replica_urls(cls, value: dict[str, str]) -> dict[str, str]:
        for name, url in value.items():
            if not name or not url.startswith(("http://", "https://")):
                raise ValueError(f"expected name=http(s)://host:port, got {name}={url}")
        return {name: url.rstrip("/").removesuffix("/v1") for name, url in value.items()}

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _proxy_addresses(cls, value: list[str]) -> list[str]:
        for entry in value:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address, a network or '*'") from None
        return value

    @field_validator("mcp_allowed_hosts")
    @classmethod
    def _lower_hosts(cls, value: list[str]) -> list[str]:
        return [host.strip().lower().rstrip(".") for host in value if host.strip()]

    @cached_property
    def resolved_database_url(self) -> str:
        """The SQLAlchemy async URL actually used."""
        url = self.database_url
        if url is None:
            return f"sqlite+aiosqlite:///{self.data_dir / 'agentic.db'}"
        if url.startswith(("postgres://", "postgresql://")):
            return "postgresql+asyncpg://" + url.split("://", 1)[1]
        if url.startswith("sqlite://") and not url.startswith("sqlite+aiosqlite://"):
            return "sqlite+aiosqlite://" + url.split("://", 1)[1]
        return url

    @property
    def is_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")

    def prepare_data_dir(self) -> None:
        """Creates data_dir readable by this user only (0700), and, for the embedded SQLite
        database, its file too (0600) before SQLite does: SQLite creates a database with
        the umask's mode (0644: every local user could read every conversation) and gives
        its -wal and -shm files the database file's mode. Existing files keep theirs."""
        self.data_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        path = self.sqlite_path
        if path is None:
            return
        path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        try:
            handle = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE_MODE)
        except FileExistsError:
            return
        os.close(handle)

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database's file (None: PostgreSQL, or an in-memory database)."""
        url = self.resolved_database_url
        prefix = "sqlite+aiosqlite:///"
        if not url.startswith(prefix):
            return None
        name = url.removeprefix(prefix).partition("?")[0]
        if not name or name == ":memory:":
            return None
        return Path(name)

    @property
    def should_auto_migrate(self) -> bool:
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate

    @property
    def binds_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def check(self) -> None:
        """Refuse combinations that would be unsafe, and renamed settings; raises
        ``ConfigError``."""
        for old, new in RENAMED_ENVIRONMENT.items():
            if old in os.environ:
                raise ConfigError(f"{old} was renamed {new}: set {new} instead")
        if self.single_tenant and (self.production or not self.binds_loopback):
            raise ConfigError(
                "single-tenant mode (auth off) is only allowed on a loopback host "
                "outside production mode"
            )
        if self.production and self.server_secret is None:
            raise ConfigError("AGENTIC_SERVER_SECRET is required in production mode")
        if self.metrics_token is not None and len(self.metrics_token.get_secret_value()) < 16:
            raise ConfigError("AGENTIC_METRICS_TOKEN must be at least 16 characters")
        if self.keep_warm_enabled and not self.kv_events_endpoints:
            # Without the replicas' KV events nothing says a paused prefix was evicted.
            raise ConfigError(
                "AGENTIC_KEEP_WARM_ENABLED needs AGENTIC_KV_EVENTS_ENDPOINTS (the replicas' "
                "KV events are what show a paused session's prefix evicted)"
            )
        replicas, followed = set(self.upstream_replicas), set(self.kv_events_endpoints)
        if replicas and followed and replicas != followed:
            # A replica's residency is found by its name: a name in one list only would
            # place rounds on residency nobody reports, or report residency nobody uses.
            raise ConfigError(
                "AGENTIC_UPSTREAM_REPLICAS and AGENTIC_KV_EVENTS_ENDPOINTS must name the same "
                f"replicas (got {sorted(replicas)} and {sorted(followed)})"
            )

    def load_server_secret(self) -> bytes:
        """The salt secret: configured, or generated once and persisted in data_dir."""
        if self.server_secret is not None:
            value = self.server_secret.get_secret_value()
            if len(value) < 16:
                raise ConfigError("AGENTIC_SERVER_SECRET must be at least 16 characters")
            return value.encode()
        if self.production:
            raise ConfigError("AGENTIC_SERVER_SECRET is required in production mode")
        path = self.data_dir / SECRET_FILE_NAME
        if not path.exists():
            self.data_dir.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
            # Exclusive create so two processes starting together agree on one secret.
            try:
                with path.open("x", encoding="ascii") as handle:
                    handle.write(secrets.token_hex(32))
                path.chmod(0o600)
            except FileExistsError:
                pass
        value = path.read_text(encoding="ascii").strip()
        if not value:
            raise ConfigError(f"server secret file {path} is empty")
        return value.encode()


class ConfigError(Exception):
    """The configuration cannot be used as given."""
