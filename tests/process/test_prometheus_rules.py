"""The Prometheus rules and the Grafana board that ship in ``deploy/``: ``promtool`` accepts
the rules; every metric their expressions and the board's queries name is one a real
``agentic-api serve`` exports (or a rule records); and a real Prometheus (Debian's
``prometheus`` package, as ``.ci/run`` installs it) scraping a real server evaluates every
rule without error, the recorded hit ratio following the turns the server ran."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from openai import OpenAI

from tests.support.clients import openai_client
from tests.support.processes import Process, end_process, process_env
from tests.support.servers import free_port
from tests.support.tenants import create_tenant
from tests.support.typed import cached_tokens
from tests.upstream_sim import Reply, SimServer

# Each starts real servers (and Prometheus): seconds apiece.
pytestmark = pytest.mark.slow

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "agentic-api.rules.yml"
BOARD = DEPLOY / "grafana" / "agentic-api.json"
# Only a bound on failure: Prometheus starts in about a second, evaluates every second.
WAIT_SECONDS = 90.0

# -- PromQL, read just far enough to list the metrics an expression selects -----------------

_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_WORD = re.compile(r"(?<![\w.:])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
    | {"bool", "offset", "inf", "nan"}
)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects: its words that are neither functions nor
    keywords, once label matchers, ranges and grouping labels are taken out."""
    text = _GROUPING.sub(" ", _RANGES.sub(" ", _MATCHERS.sub(" ", _QUOTED.sub('""', expr))))
    names = set()
    for word in _WORD.finditer(text):
        if text[word.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if word.group().lower() not in _KEYWORDS:
            names.add(word.group())
    return names


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def board_queries() -> list[str]:
    """Every PromQL the board runs: its panels' targets and its variables' queries (for
    ``label_values(SELECTOR, label)``: the selector)."""
    board = json.loads(BOARD.read_text(encoding="utf-8"))
    queries = [
        target["expr"]
        for panel in board["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        found = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["query"]["query"])
        assert found, variable
        queries.append(found.group(1))
    return queries


def exported_series(metrics_text: str) -> set[str]:
    """The series names a scrape's families stand for (a histogram's three suffixes)."""
    names = set()
    for line in metrics_text.splitlines():
        if not line.startswith("# TYPE "):
            continue
        name, kind = line.split()[2:4]
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            names.add(name)
    return names


def test_the_reader_finds_the_metrics_an_expression_names() -> None:
    # The check below is only as good as this reader: it must see a name it does not know.
    assert metric_names(
        'sum by (model, le) (rate(agentic_nope_bucket{status=~"5.."}[5m])) / on (model) '
        "group_left max(agentic:recorded) > 1e3 and bool agentic_gauge offset 5m"
    ) == {"agentic_nope_bucket", "agentic:recorded", "agentic_gauge"}


# -- promtool ----------------------------------------------------------------------------


def test_promtool_accepts_the_rules() -> None:
    done = subprocess.run(
        [_binary("promtool"), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


# -- a real server -----------------------------------------------------------------------


@pytest.fixture
def server(fresh_db: str, sim: SimServer, tmp_path: Path) -> Iterator[Process]:
    """``agentic-api serve`` with its defaults (no metrics token: a scrape needs none)."""
    process = Process.serve(process_env(fresh_db, sim.url, tmp_path / "server"))
    yield process
    process.stop()


def test_every_metric_the_rules_and_the_board_name_is_exported(server: Process) -> None:
    exported = exported_series(httpx.get(f"{server.url}/metrics", timeout=30).text)
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    named: dict[str, set[str]] = {}
    for where, expr in [
        *((rule.get("record") or rule["alert"], rule["expr"]) for rule in rules()),
        *(("board", query) for query in board_queries()),
    ]:
        for name in metric_names(expr):
            named.setdefault(name, set()).add(where)
    assert named, "no metric found in the rules or the board"
    unknown = {name: sorted(where) for name, where in named.items() if name not in exported}
    unknown = {name: where for name, where in unknown.items() if name not in recorded}
    assert unknown == {}
    # Every recording rule is put to use, by an alert or the board.
    unused = recorded - {name for name, where in named.items() if where - {name}}
    assert unused == set()


class Prometheus:
    """Debian's ``prometheus`` on a free loopback port, scraping ``target`` every second
    and evaluating the rules every second, its data in ``folder``."""

    def __init__(self, folder: Path, target: str) -> None:
        config = folder / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {"job_name": "agentic-api", "static_configs": [{"targets": [target]}]}
                    ],
                }
            ),
            encoding="utf-8",
        )
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = folder / "prometheus.log"
        with self.log.open("wb") as sink:
            self.popen = subprocess.Popen(
                [
                    _binary("prometheus"),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address={self.url.removeprefix('http://')}",
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def api(self, path: str, **params: str) -> Any:
        reply = self.http.get(f"/api/v1/{path}", params=params)
        reply.raise_for_status()
        body = reply.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait(self, what: str, read: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:
            if self.popen.poll() is not None:
                raise AssertionError(f"Prometheus exited:\n{self.output()}")
            try:
                found = read()
            except httpx.TransportError:
                found = None
            except httpx.HTTPStatusError as exc:
                # 503 until its storage is open (seconds, on a busy machine): not yet.
                if exc.response.status_code != 503:
                    raise
                found = None
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"waited in vain for {what}:\n{self.output()}")
            time.sleep(0.25)

    def stop(self) -> None:
        self.http.close()
        end_process(self.popen)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def test_a_live_prometheus_scrapes_the_server_and_evaluates_every_rule(
    server: Process, fresh_db: str, sim: SimServer, tmp_path: Path
) -> None:
    prometheus = Prometheus(tmp_path, server.url.removeprefix("http://"))
    try:
        prometheus.wait(
            "the server's target up",
            lambda: [t for t in prometheus.api("targets")["activeTargets"] if t["health"] == "up"],
        )
        client: OpenAI = openai_client(
            f"{server.url}/v1", create_tenant(fresh_db).api_key, timeout=30
        )
        model = sim.config.model
        sim.push(Reply("the first answer"), Reply("the second answer"))
        first = client.responses.create(model=model, input="a long opening question " * 30)
        # Scraped before the continuation: its cached tokens are then an increase.
        prometheus.wait(
            "the first turn's tokens",
            lambda: prometheus.query(f'agentic_input_tokens_total{{model="{model}"}}'),
        )
        second = client.responses.create(model=model, input="go on", previous_response_id=first.id)
        assert cached_tokens(second) > 0

        ratio = prometheus.wait(
            "a recorded hit ratio above 0",
            lambda: [
                sample
                for sample in prometheus.query(
                    f'agentic_model:cache_hit_ratio:rate5m{{model="{model}"}}'
                )
                if float(sample["value"][1]) > 0
            ],
        )
        assert 0 < float(ratio[0]["value"][1]) <= 1

        def evaluated() -> list[dict[str, Any]]:
            found = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
            return found if all(rule["health"] != "unknown" for rule in found) else []

        evaluated_rules = prometheus.wait("every rule evaluated", evaluated)
        assert sorted(rule["name"] for rule in evaluated_rules) == sorted(
            rule.get("record") or rule["alert"] for rule in rules()
        )
        failing = {
            rule["name"]: rule.get("lastError")
            for rule in evaluated_rules
            if rule["health"] != "ok" or rule.get("lastError")
        }
        assert failing == {}
        # With one quiet server, no alert fires (the cache hit, nothing failed).
        firing = [
            alert["labels"]["alertname"]
            for alert in prometheus.api("alerts")["alerts"]
            if alert["state"] == "firing"
        ]
        assert firing == []
    finally:
        prometheus.stop()


def _binary(name: str) -> str:
    """Debian's ``prometheus`` package provides both (``.ci/run`` installs it)."""
    found = shutil.which(name)
    assert found, f"{name} is missing: apt-get install -y prometheus"
    return found
