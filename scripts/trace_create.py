"""Follows one create request through the server, from the route to the commit, and
counts what it crosses: the modules (files) and packages whose code runs, the call
levels from the route's function to ``commit_turn``, and the upward hops (calls from a
module of a lower layer into one of a higher layer, callbacks included).

It runs our app and the simulator on loopback in this process, makes a first turn, then
traces a third (the second continuation of a chain, non-streamed unless ``--stream``)
with ``sys.setprofile`` in the server's thread, counting only the calls made for the
request: those whose stack reaches the route's function (or, streamed, the turn's task in
``turns/run.py``); what other threads run for it (a SQLite driver's, the turn store's
writer) and background loops are left out. A generator resumed by its consumer is not
counted as a hop; a decorator's wrapper calling the function it wraps is. It also
counts, with grimp, the imports of a higher layer's names made by the modules the request
crossed. Layers are the import-linter contract's, with ``turns/`` split into its phases
(data < prepare < runner < kinds < run < stream); for a tree from before the phases, the
flat ``turns`` modules are placed in the phase their concern belongs to (``BEFORE``).

Run from the repository root (or a copy of another commit's tree)::

    PYTHONPATH=. .venv/bin/python scripts/trace_create.py [--stream]
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

import grimp
import httpx

ROOT = Path.cwd().resolve()
OURS = (str(ROOT / "agentic_api"), str(ROOT / "lineage"))

# Lowest first; a module's layer is the longest prefix listed.
LAYERS: list[tuple[str, ...]] = [
    ("lineage",),
    ("agentic_api.settings", "agentic_api.log", "agentic_api.metrics", "agentic_api.errors"),
    ("agentic_api.wire",),
    ("agentic_api.storage", "agentic_api.upstream", "agentic_api.mcp", "agentic_api.cache"),
    ("agentic_api.runtime",),
    ("agentic_api.turns.data",),
    ("agentic_api.turns.prepare",),
    ("agentic_api.turns.runner",),
    ("agentic_api.turns.kinds",),
    ("agentic_api.turns.run",),
    # (Trees before stop 33: the streamed entry point had a module of its own.)
    ("agentic_api.turns.stream",),
    ("agentic_api.idempotency", "agentic_api.messages"),
    ("agentic_api.background",),
    ("agentic_api.serving",),
    ("agentic_api.http",),
    ("agentic_api.app", "agentic_api.plugin_commands"),
    ("agentic_api.cli",),
]
# The flat turns/ modules of before the phases, by the phase their concern is in now.
BEFORE = {
    "commit_steps": "data",
    "token_plan": "data",
    "prepare": "prepare",
    "approvals": "prepare",
    "connection_histories": "prepare",
    "conversation": "prepare",
    "errors": "prepare",
    "history": "prepare",
    "render": "prepare",
    "summary_request": "prepare",
    "in_progress": "runner",
    "relay": "runner",
    "channel": "runner",
    "round": "runner",
    "tokens": "runner",
    "finish": "runner",
    "commit": "runner",
    "rebuilt_events": "runner",
    "tool_loop": "kinds",
    "tool_events": "kinds",
    "compaction": "kinds",
    "input_tokens": "kinds",
}


def module_of(filename: str) -> str | None:
    if not filename.startswith(OURS) or not filename.endswith(".py"):
        return None
    parts = Path(filename).relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> int:
    flat = module.split(".")
    if flat[:2] == ["agentic_api", "turns"] and len(flat) == 3 and flat[2] in BEFORE:
        module = f"agentic_api.turns.{BEFORE[flat[2]]}"
    best, rank = -1, -1
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > best:
                best, rank = len(name), index
    return rank


class Trace:
    def __init__(self) -> None:
        self.on = False
        self.modules: Counter[str] = Counter()
        self.functions: defaultdict[str, set[str]] = defaultdict(set)
        self.upward: Counter[tuple[str, str]] = Counter()
        self.levels_to_commit: int | None = None
        self.chain_to_commit: list[str] = []

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if not self.on or event != "call":
            return
        callee = module_of(frame.f_code.co_filename)
        if callee is None or not _on_the_path(frame):
            return
        self.modules[callee] += 1
        self.functions[callee].add(frame.f_code.co_name)
        caller_frame = frame.f_back
        while caller_frame is not None and module_of(caller_frame.f_code.co_filename) is None:
            caller_frame = caller_frame.f_back
        if caller_frame is not None:
            caller = module_of(caller_frame.f_code.co_filename)
            assert caller is not None
            # A generator resumed by whoever iterates it is not a call of the layer's.
            resumed = frame.f_code.co_flags & inspect.CO_GENERATOR
            if layer_of(caller) < layer_of(callee) and not resumed:
                self.upward[
                    (
                        f"{caller}:{caller_frame.f_code.co_name}",
                        f"{callee}:{frame.f_code.co_name}",
                    )
                ] += 1
        if frame.f_code.co_name == "commit_turn" and self.levels_to_commit is None:
            self.chain_to_commit = _chain_from_route(frame)
            self.levels_to_commit = len(self.chain_to_commit)


# Where the request's own code runs: the route's task, and a streamed turn's task.
ROOTS = ("agentic_api.http.routes.responses", "agentic_api.turns.run")


def _on_the_path(frame: FrameType) -> bool:
    """Whether ``frame`` runs for the request (not a background loop, another request)."""
    current: FrameType | None = frame
    while current is not None:
        if module_of(current.f_code.co_filename) in ROOTS:
            return True
        current = current.f_back
    return False


def _chain_from_route(frame: FrameType) -> list[str]:
    """Our frames from the route's function down to ``frame``, outermost first."""
    chain: list[str] = []
    current: FrameType | None = frame
    while current is not None:
        module = module_of(current.f_code.co_filename)
        if module is not None:
            chain.append(f"{module}:{current.f_code.co_name}")
            if module == "agentic_api.http.routes.responses":
                break
        current = current.f_back
    return chain[::-1]


class Profiled:
    """The app, with the trace installed in the server's thread by its first request
    (a profiler from start-up on would slow the start past the server's deadline)."""

    def __init__(self, app: Any, trace: Trace) -> None:
        self.app = app
        self.trace = trace

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and sys.getprofile() is None:
            sys.setprofile(self.trace.profile)
        await self.app(scope, receive, send)


def upward_imports(modules: set[str]) -> list[tuple[str, str]]:
    graph = grimp.build_graph("agentic_api", "lineage")
    found: list[tuple[str, str]] = []
    for module in sorted(modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if layer_of(module) < layer_of(imported):
                found.append((module, imported))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", action="store_true", help="trace a streamed create")
    parser.add_argument(
        "--functions", action="store_true", help="list the functions called in each file"
    )
    args = parser.parse_args()

    from agentic_api.app import create_app
    from agentic_api.settings import Settings
    from agentic_api.storage.migrate import upgrade
    from tests.support.servers import ThreadedServer
    from tests.support.tenants import create_tenant
    from tests.upstream_sim.behaviors import Reply
    from tests.upstream_sim.server import SimServer

    trace = Trace()
    with tempfile.TemporaryDirectory() as folder, SimServer() as sim:
        url = f"sqlite+aiosqlite:///{folder}/trace.db"
        upgrade(url)
        tenant = create_tenant(url)
        settings = Settings(
            database_url=url,
            upstream_base_url=sim.url,
            data_dir=Path(folder),
            server_secret="t" * 32,
            log_level="warning",
            auto_migrate=False,
        )
        server = ThreadedServer(Profiled(create_app(settings), trace), strict=False).start()
        try:
            headers = {"Authorization": f"Bearer {tenant.api_key}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
                sim.push(Reply("first"), Reply("second"), Reply("third"))
                first = client.post(
                    "/v1/responses", json={"model": sim.config.model, "input": "one"}
                )
                first.raise_for_status()
                # The traced turn is the second continuation: the server's once-per-process
                # work (its read connections opened, the model's capabilities and sampling
                # defaults learned) is done by then, as it is for every turn after.
                warm = client.post(
                    "/v1/responses",
                    json={
                        "model": sim.config.model,
                        "input": "two",
                        "previous_response_id": first.json()["id"],
                        "stream": args.stream,
                    },
                )
                warm.raise_for_status()
                body = {
                    "model": sim.config.model,
                    "input": "three",
                    "previous_response_id": _id_of(warm),
                    "stream": args.stream,
                }
                trace.on = True
                second = client.post("/v1/responses", json=body)
                second.read()
                trace.on = False
                second.raise_for_status()
        finally:
            trace.on = False
            server.stop()

    modules = set(trace.modules)
    packages = {m.rsplit(".", 1)[0] if not _is_package(m) else m for m in modules}
    print(f"create (stream={args.stream}), a continuation, traced from the route to the end")
    print(f"files crossed: {len(modules)}")
    print(f"packages crossed: {len(packages)} ({', '.join(sorted(packages))})")
    print(f"call levels, route to commit_turn: {trace.levels_to_commit}")
    for step in trace.chain_to_commit:
        print(f"    {step}")
    print(f"upward hops (distinct caller -> callee): {len(trace.upward)}")
    for (caller, callee), times in sorted(trace.upward.items()):
        print(f"    {caller} -> {callee} (x{times})")
    found = upward_imports(modules)
    print(f"imports of a higher layer's modules by the files crossed: {len(found)}")
    for module, imported in found:
        print(f"    {module} -> {imported}")
    print("files:")
    for module in sorted(modules):
        called = f": {', '.join(sorted(trace.functions[module]))}" if args.functions else ""
        print(f"    {module}{called}")


def _id_of(reply: httpx.Response) -> str:
    """A create's response id, from its JSON or (streamed) its first event."""
    if reply.headers.get("content-type", "").startswith("application/json"):
        return str(reply.json()["id"])
    for line in reply.text.splitlines():
        if line.startswith("data: ") and '"response.created"' in line:
            return str(json.loads(line[6:])["response"]["id"])
    raise RuntimeError("no response id in the reply")


def _is_package(module: str) -> bool:
    return (ROOT / Path(*module.split(".")) / "__init__.py").exists()


if __name__ == "__main__":
    main()
