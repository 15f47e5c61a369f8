"""Arize Phoenix as a subprocess: the OTLP receiver a user would run, started from its own
cached virtualenv (``scripts/tracing/setup_phoenix.sh``), and its REST API to read back
the spans it stored."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.processes import end_process
from tests.support.servers import free_port

SETUP = Path(__file__).resolve().parents[2] / "scripts" / "tracing" / "setup_phoenix.sh"
# Phoenix migrates its SQLite database and builds its app before it listens: about 30 s at
# load average 5 on this project's 2-core machine. Only a bound on failure.
START_TIMEOUT_SECONDS = 240.0


@dataclass(frozen=True)
class StoredSpan:
    """A span as Phoenix stored it (its ``/v1/projects/{project}/spans`` shape)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    # Phoenix's OpenInference kind, which it infers from gen_ai.operation.name.
    span_kind: str
    status_code: str
    attributes: dict[str, Any]

    @classmethod
    def of(cls, row: dict[str, Any]) -> StoredSpan:
        return cls(
            name=row["name"],
            trace_id=row["context"]["trace_id"],
            span_id=row["context"]["span_id"],
            parent_id=row["parent_id"],
            span_kind=row["span_kind"],
            status_code=row["status_code"],
            attributes=row["attributes"],
        )


# Phoenix's session view: the session's traces in order, each with its root span (the
# turn) and its LLM spans (the model rounds), and the token totals Phoenix sums over them.
SESSION_QUERY = """
query Session($id: String!) {
  getProjectSessionById(sessionId: $id) {
    sessionId
    numTraces
    tokenUsage { prompt completion }
    traces(first: 100) {
      edges { node {
        traceId
        rootSpan { name spanKind cumulativeTokenCountPrompt tokenPromptDetails { cacheRead } }
      } }
    }
  }
}
"""


@dataclass(frozen=True)
class SessionTurn:
    """One trace of a session as Phoenix shows it: its root span's name and kind, the prompt
    tokens of its LLM spans (Phoenix counts tokens on LLM spans only, summed up the tree)
    and the root's cached tokens."""

    trace_id: str
    name: str
    span_kind: str
    prompt_tokens: int | None
    cache_read: int | None


@dataclass(frozen=True)
class StoredSession:
    """Phoenix's session view (``getProjectSessionById``)."""

    session_id: str
    num_traces: int
    prompt_tokens: int
    completion_tokens: int
    turns: list[SessionTurn]

    @classmethod
    def of(cls, node: dict[str, Any]) -> StoredSession:
        turns = []
        for edge in node["traces"]["edges"]:
            root = edge["node"]["rootSpan"] or {}
            turns.append(
                SessionTurn(
                    trace_id=edge["node"]["traceId"],
                    name=root.get("name", ""),
                    span_kind=root.get("spanKind", ""),
                    prompt_tokens=root.get("cumulativeTokenCountPrompt"),
                    cache_read=(root.get("tokenPromptDetails") or {}).get("cacheRead"),
                )
            )
        return cls(
            session_id=node["sessionId"],
            num_traces=node["numTraces"],
            prompt_tokens=node["tokenUsage"]["prompt"],
            completion_tokens=node["tokenUsage"]["completion"],
            turns=turns,
        )


class Phoenix:
    """``phoenix serve`` on free loopback ports, its data in ``folder``."""

    def __init__(self, folder: Path) -> None:
        venv = _prepared_venv()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(free_port()),
            "PHOENIX_WORKING_DIR": str(folder),
            # Nothing leaves the machine (the sandbox has no network besides registries).
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        self.log = folder / "phoenix.log"
        with self.log.open("wb") as sink:
            self.popen = subprocess.Popen(
                [str(venv / "bin" / "phoenix"), "serve"],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def wait_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise AssertionError(f"Phoenix exited during start-up:\n{self.output()}")
            try:
                if self.http.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"Phoenix did not come up:\n{self.output()}")

    @property
    def traces_endpoint(self) -> str:
        """Where OTLP/HTTP goes (the SDK appends ``/v1/traces`` to a base endpoint)."""
        return self.url

    def spans(self, project: str, **filters: str | list[str]) -> list[StoredSpan]:
        """The project's stored spans matching Phoenix's own filters (trace_id, name,
        attribute ``key:json-value``), oldest first."""
        reply = self.http.get(
            f"/v1/projects/{project}/spans",
            params={**filters, "limit": 1000, "sort": "start_time", "order": "asc"},
        )
        if reply.status_code == 404:  # the project appears with its first span
            return []
        reply.raise_for_status()
        return [StoredSpan.of(row) for row in reply.json()["data"]]

    def trace_of_response(self, project: str, response_id: str) -> str:
        """The trace whose server span names ``response_id``, found by Phoenix's attribute
        filter (the way an operator looks a turn up)."""
        found = self.wait_for(
            lambda: self.spans(project, attribute=f"gen_ai.response.id:{json.dumps(response_id)}"),
            lambda spans: len(spans) > 0,
        )
        return found[0].trace_id

    def trace(self, project: str, trace_id: str, count: int) -> list[StoredSpan]:
        """The trace's spans, once Phoenix stored ``count`` of them."""
        return self.wait_for(
            lambda: self.spans(project, trace_id=trace_id), lambda spans: len(spans) >= count
        )

    def wait_for(
        self,
        read: Callable[[], list[StoredSpan]],
        done: Callable[[list[StoredSpan]], bool],
        timeout: float = 60.0,
    ) -> list[StoredSpan]:
        # The server's batch processor exports within its schedule delay; Phoenix then
        # queues and inserts: poll, bounded.
        deadline = time.monotonic() + timeout
        while True:
            found = read()
            if done(found) or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        """Phoenix's GraphQL API (what its own UI reads), failing on any error."""
        reply = self.http.post("/graphql", json={"query": query, "variables": variables})
        reply.raise_for_status()
        body = reply.json()
        assert not body.get("errors"), body["errors"]
        data: dict[str, Any] = body["data"]
        return data

    def session(self, session_id: str, traces: int) -> StoredSession | None:
        """The session view of ``session_id`` once it groups ``traces`` traces (None while
        Phoenix knows no such session)."""
        deadline = time.monotonic() + 60.0
        while True:
            found = self.graphql(SESSION_QUERY, id=session_id)["getProjectSessionById"]
            stored = None if found is None else StoredSession.of(found)
            if (stored is not None and stored.num_traces >= traces) or (
                time.monotonic() > deadline
            ):
                return stored
            time.sleep(0.2)

    def stop(self) -> None:
        self.http.close()
        end_process(self.popen)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _prepared_venv() -> Path:
    """Phoenix's virtualenv, installed by the setup script when missing (cached after)."""
    done = subprocess.run([str(SETUP)], check=False, capture_output=True, text=True)
    assert done.returncode == 0, f"{SETUP} failed:\n{done.stdout}\n{done.stderr}"
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("AGENTIC_PHOENIX_VENV="), done.stdout
    return Path(line.partition("=")[2])
