"""``agentic-api bench ...``: the typer sub-app, which ``agentic-api`` finds through the
``agentic_api.commands`` entry point (pyproject.toml), never by importing it."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from agentic_bench.agents import AgentsConfig, Chain, ToolChoice, run_agents
from agentic_bench.agents import summarize as summarize_agents
from agentic_bench.agents_report import write_report, write_run
from agentic_bench.client import REPLICA_HEADERS, BenchError, Target
from agentic_bench.continuations import ContinuationConfig, run_continuations, summarize
from agentic_bench.continuations import write_outputs as write_continuations
from agentic_bench.multi_agent import MultiAgentConfig, run_multi_agent
from agentic_bench.multi_agent import summarize as summarize_multi_agent
from agentic_bench.multi_agent import table as multi_agent_table
from agentic_bench.overhead import OverheadConfig, run_overhead
from agentic_bench.overhead import write_outputs as write_overhead
from agentic_bench.redraw import redraw
from agentic_bench.streaming import StreamingConfig, StreamTarget, run_streaming
from agentic_bench.streaming import failures as stream_failures
from agentic_bench.streaming import summarize as summarize_streaming
from agentic_bench.streaming import table as streaming_table
from agentic_bench.streaming import write_outputs as write_streaming

bench_app = typer.Typer(
    help="Measure a deployment: prefix-cache reuse of continuations, per-turn overhead, "
    "streaming cost, concurrent agents in tool loops.",
    no_args_is_help=True,
    add_completion=False,  # a sub-command of agentic-api (an entry point), not a program
)


# Options several commands take, declared once.
DirectOption = Annotated[
    str | None, typer.Option(help="The upstream itself: the 'direct' baseline.")
]
ApiKeysOption = Annotated[
    list[str] | None, typer.Option(help="NAME=KEY for a target that needs one.")
]
ModelOption = Annotated[str | None, typer.Option(help="Model; default: first of /v1/models.")]
OutOption = Annotated[Path, typer.Option(help="Output folder.")]
TenantKeysOption = Annotated[
    list[str] | None, typer.Option(help="API key; repeat for several tenants (cycled).")
]
BlockSizeOption = Annotated[int, typer.Option(min=1, help="The upstream's KV block size.")]
ReplicaHeaderOption = Annotated[
    list[str] | None, typer.Option(help="Response header naming the serving replica.")
]
AnyTarget = TypeVar("AnyTarget", Target, StreamTarget)
T = TypeVar("T")


def _pairs(values: list[str], what: str) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise typer.BadParameter(f"{what} must look like NAME=VALUE, got {value!r}")
        parsed[name] = rest
    return parsed


def _pids(values: list[str], names: list[str]) -> dict[str, int]:
    parsed = _pairs(values, "--pid")
    unknown = set(parsed) - set(names)
    if unknown:
        raise typer.BadParameter(f"--pid for unknown targets: {sorted(unknown)}")
    try:
        return {name: int(pid) for name, pid in parsed.items()}
    except ValueError as exc:
        raise typer.BadParameter("--pid takes NAME=PID with a numeric PID") from exc


def _machine() -> dict[str, Any]:
    machine: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    # The machine is shared: how busy it was when the run started belongs with the figures.
    if hasattr(os, "getloadavg"):
        machine["load_average"] = [round(v, 2) for v in os.getloadavg()]
    return machine


def _one_target(
    url: str, stateful: bool, api_keys: list[str] | None, replica_headers: list[str] | None
) -> Target:
    # The first key answers /v1/models; each pair or agent then sends its own tenant's key.
    return Target(
        "target",
        url,
        stateful=stateful,
        api_key=api_keys[0] if api_keys else None,
        replica_headers=tuple(h.lower() for h in replica_headers or REPLICA_HEADERS),
    )


def _named_targets(
    make: type[AnyTarget], targets: list[str], api_keys: list[str], direct: str | None
) -> tuple[list[AnyTarget], str]:
    """The compared targets (NAME=URL, stateful, each with its NAME=KEY key), the direct
    upstream first when given; and the baseline's name."""
    urls = _pairs(targets, "--target")
    keys = _pairs(api_keys, "--api-key")
    unknown = set(keys) - set(urls)
    if unknown:
        raise typer.BadParameter(f"--api-key for unknown targets: {sorted(unknown)}")
    named = [make(n, u, stateful=True, api_key=keys.get(n)) for n, u in urls.items()]
    if direct:
        named.insert(0, make("direct", direct, stateful=False))
    if not named:
        raise typer.BadParameter("give at least one --target or --direct")
    return named, "direct" if direct else named[0].name


def _load_after(meta: dict[str, Any]) -> None:
    # Beside the load average taken before the run: did other work load the machine?
    if hasattr(os, "getloadavg"):
        meta["load_average_after"] = [round(v, 2) for v in os.getloadavg()]


def _echo_written(paths: Iterable[Path]) -> None:
    for path in paths:
        typer.echo(f"wrote {path}")


def _run_on(
    targets: Sequence[Target | StreamTarget],
    model: str | None,
    work: Callable[[str], Awaitable[T]],
) -> T:
    """``work`` with the model (given, else the first target's first), the targets closed
    after it; a BenchError ends the command with exit status 1."""

    async def run() -> T:
        try:
            return await work(model or await targets[0].first_model())
        finally:
            for target in targets:
                await target.aclose()

    result: T = _run(run())
    return result


def _run(work: Any) -> Any:
    try:
        return asyncio.run(work)
    except BenchError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@bench_app.command()
def continuations(
    url: Annotated[str, typer.Option(help="Responses server (or upstream with --direct).")],
    direct: Annotated[
        bool, typer.Option("--direct", help="URL is a raw upstream: carry history, no store.")
    ] = False,
    api_key: TenantKeysOption = None,
    salt: Annotated[
        list[str] | None, typer.Option(help="cache_salt for --direct; repeat to cycle.")
    ] = None,
    model: ModelOption = None,
    pairs: Annotated[int, typer.Option(min=1)] = 10,
    prompt_words: Annotated[int, typer.Option(min=1, help="Size of the cold prompt.")] = 600,
    followup_words: Annotated[int, typer.Option(min=1)] = 40,
    max_output_tokens: Annotated[int, typer.Option(min=1)] = 16,
    temperature: float = 0.0,
    block_size: BlockSizeOption = 32,
    concurrency: Annotated[int, typer.Option(min=1, help="Pairs in flight at once.")] = 1,
    replica_header: ReplicaHeaderOption = None,
    admin_key: Annotated[
        str | None,
        typer.Option(help="Our server's admin key: add each continuation's token account."),
    ] = None,
    out: OutOption = Path("bench-results"),
    name: Annotated[str, typer.Option(help="Base name of the output files.")] = "continuations",
) -> None:
    """Cold turn + continuation pairs: hit ratio vs the block-aligned ideal and the
    token-exact ideal, latency; with --admin-key, lost tokens by cause."""
    target = _one_target(url, not direct, api_key, replica_header)

    async def work(chosen: str) -> tuple[list[dict[str, Any]], ContinuationConfig]:
        config = ContinuationConfig(
            model=chosen,
            pairs=pairs,
            prompt_words=prompt_words,
            followup_words=followup_words,
            max_output_tokens=max_output_tokens,
            temperature=temperature,
            block_size=block_size,
            salts=tuple(salt or ()),
            api_keys=tuple(api_key) if api_key else (None,),
            admin_key=admin_key,
        )
        return await run_continuations(target, config, concurrency=concurrency), config

    rows, config = _run_on([target], model, work)
    result = {
        "command": "continuations",
        "url": url,
        "direct": direct,
        "model": config.model,
        "tenants": len(config.api_keys),
        "prompt_words": prompt_words,
        "followup_words": followup_words,
        "max_output_tokens": max_output_tokens,
        "temperature": temperature,
        "concurrency": concurrency,
        "machine": _machine(),
        "summary": summarize(rows, config),
    }
    _echo_written(write_continuations(out, name, rows, result))
    typer.echo(json.dumps(result["summary"], indent=2, default=str))


@bench_app.command()
def overhead(
    target: Annotated[
        list[str],
        typer.Option(help="NAME=URL of a Responses server (stateful); repeat to compare."),
    ],
    direct: DirectOption = None,
    api_key: ApiKeysOption = None,
    pid: Annotated[
        list[str] | None,
        typer.Option(help="NAME=PID of a local target's server: its CPU per turn."),
    ] = None,
    model: ModelOption = None,
    depths: Annotated[str, typer.Option(help="Comma-separated depths.")] = "10,40,200",
    probes: Annotated[int, typer.Option(min=1, help="Measured turns per depth.")] = 30,
    concurrency: Annotated[int, typer.Option(min=1)] = 4,
    turn_words: Annotated[int, typer.Option(min=1, help="Size of each user message.")] = 12,
    max_output_tokens: Annotated[int, typer.Option(min=1)] = 8,
    out: OutOption = Path("bench-results"),
    name: Annotated[str, typer.Option(help="Base name of the output files.")] = "overhead",
) -> None:
    """Per-turn latency direct vs through Responses servers, at several depths."""
    targets, baseline = _named_targets(Target, target, api_key or [], direct)
    pids = _pids(pid or [], [t.name for t in targets])
    depth_list = [int(d) for d in depths.split(",") if d.strip()]
    if not depth_list or min(depth_list) < 1:
        raise typer.BadParameter("--depths needs positive integers")

    async def work(
        chosen: str,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], OverheadConfig]:
        config = OverheadConfig(
            model=chosen,
            depths=depth_list,
            probes=probes,
            concurrency=concurrency,
            turn_words=turn_words,
            max_output_tokens=max_output_tokens,
        )
        rows, chains = await run_overhead(targets, config, baseline, pids)
        return rows, chains, config

    machine = _machine()  # before the run: its load average is the machine's, not ours
    rows, chains, config = _run_on(targets, model, work)
    meta = {
        "command": "overhead",
        "targets": {t.name: t.base_url for t in targets},
        "baseline": baseline,
        "pids": sorted(pids),
        "model": config.model,
        "depths": depth_list,
        "probes": probes,
        "concurrency": concurrency,
        "turn_words": turn_words,
        "max_output_tokens": max_output_tokens,
        "machine": machine,
    }
    _load_after(meta)
    _echo_written(write_overhead(out, name, rows, chains, meta, baseline))
    for row in rows:
        typer.echo(
            f"{row['target']:>10} depth {row['depth']:>4}: p50 {row['p50_s'] * 1000:8.2f} ms  "
            f"p95 {row['p95_s'] * 1000:8.2f} ms  p99 {row['p99_s'] * 1000:8.2f} ms  "
            f"added p50 {_ms(row['added_p50_ms'])}  {row['turns_per_s']:.1f} turns/s"
            + _cpu(row["server_cpu_ms_per_turn"])
        )


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f} ms"


def _cpu(value: float | None) -> str:
    return "" if value is None else f"  server CPU {value:.2f} ms/turn"


@bench_app.command()
def streaming(
    target: Annotated[
        list[str] | None,
        typer.Option(help="NAME=URL of a Responses server (stored turns); repeat to compare."),
    ] = None,
    direct: DirectOption = None,
    api_key: ApiKeysOption = None,
    pid: Annotated[
        list[str] | None,
        typer.Option(help="NAME=PID of a local target's server: its CPU per 1,000 events."),
    ] = None,
    model: ModelOption = None,
    streams: Annotated[int, typer.Option(min=1, help="Concurrent streams per round.")] = 48,
    rounds: Annotated[int, typer.Option(min=1, help="Measured rounds per target.")] = 3,
    output_tokens: Annotated[
        int,
        typer.Option(
            min=1,
            help="Text tokens of each reply (max_output_tokens is one more, for the "
            "end-of-sequence token; the upstream decides the length: the simulator's "
            "--default-reply-tokens).",
        ),
    ] = 200,
    input_words: Annotated[int, typer.Option(min=1, help="Size of each user message.")] = 40,
    warmup_rounds: Annotated[int, typer.Option(min=0, help="Unmeasured rounds first.")] = 1,
    out: OutOption = Path("bench-results"),
    name: Annotated[str, typer.Option(help="Base name of the output files.")] = "streaming",
) -> None:
    """Concurrent streamed turns direct vs through Responses servers: TTFB, TTFT, tail,
    delivered deltas/s, server CPU per 1,000 events. Exits 1 if any stream failed (after
    writing every file)."""
    targets, baseline = _named_targets(StreamTarget, target or [], api_key or [], direct)
    pids = _pids(pid or [], [t.name for t in targets])

    async def work(chosen: str) -> tuple[list[Any], StreamingConfig]:
        config = StreamingConfig(
            model=chosen,
            streams=streams,
            rounds=rounds,
            output_tokens=output_tokens,
            input_words=input_words,
            warmup_rounds=warmup_rounds,
        )
        return list(await run_streaming(targets, config, pids)), config

    machine = _machine()  # before the run: its load average is the machine's, not ours
    measured, config = _run_on(targets, model, work)
    rows = summarize_streaming(measured, config, baseline)
    meta = {
        "command": "streaming",
        "targets": {t.name: t.base_url for t in targets},
        "baseline": baseline,
        "pids": sorted(pids),
        "model": config.model,
        "streams": streams,
        "rounds": rounds,
        "warmup_rounds": warmup_rounds,
        "output_tokens": output_tokens,
        "max_output_tokens": output_tokens + 1,
        "input_words": input_words,
        "machine": machine,
    }
    _load_after(meta)
    _echo_written(write_streaming(out, name, measured, rows, meta))
    typer.echo(streaming_table(rows, baseline))
    failed = stream_failures(measured)
    for target_name, reasons in failed.items():
        for reason, count in reasons.items():
            typer.echo(f"FAILED {target_name}: {count} x {reason}", err=True)
    if failed:
        raise typer.Exit(1)


@bench_app.command()
def agents(
    url: Annotated[str, typer.Option(help="Responses server (or upstream/router for history).")],
    chain: Annotated[
        str,
        typer.Option(
            help="previous_response_id | conversation (stateful server) | history (the "
            "client carries it, store: false: a raw upstream or a router)."
        ),
    ] = "previous_response_id",
    api_key: TenantKeysOption = None,
    salt: Annotated[str | None, typer.Option(help="cache_salt sent with --chain history.")] = None,
    model: ModelOption = None,
    agents: Annotated[int, typer.Option("--agents", min=1, help="Agents at once.")] = 4,
    turns: Annotated[int, typer.Option(min=1, help="Model turns per agent.")] = 4,
    stream: Annotated[bool, typer.Option("--stream", help="Stream (measures TTFT).")] = False,
    tool_seconds: Annotated[
        float, typer.Option(min=0, help="Pause before answering each call.")
    ] = 2.0,
    think_seconds: Annotated[float, typer.Option(min=0, help="Pause before each request.")] = 0.1,
    jitter: Annotated[float, typer.Option(min=0, max=1, help="+- fraction on pauses.")] = 0.25,
    ramp_seconds: Annotated[float, typer.Option(min=0, help="Spread of agent starts.")] = 0.0,
    tool_choice: Annotated[
        str, typer.Option(help="named (first tool) | required | auto (the model decides).")
    ] = "named",
    tools: Annotated[int, typer.Option(min=1, help="Shared function tools.")] = 3,
    system_words: Annotated[int, typer.Option(min=1, help="Shared system prompt size.")] = 300,
    task_words: Annotated[int, typer.Option(min=1)] = 60,
    tool_output_words: Annotated[int, typer.Option(min=1)] = 40,
    max_output_tokens: Annotated[int, typer.Option(min=1)] = 32,
    temperature: float = 0.0,
    block_size: BlockSizeOption = 32,
    seed: int = 0,
    nonce: Annotated[
        str, typer.Option(help="Prefix of the shared prompt: a rerun that must start cold.")
    ] = "",
    session_key: Annotated[
        bool,
        typer.Option(
            help="Send each agent's prompt_cache_key (from the nonce and its index): a "
            "stateful server derives the session from it, so a rerun with the same nonce "
            "and API key has the same sessions (and the same consistent-hash placement)."
        ),
    ] = False,
    retries: Annotated[int, typer.Option(min=0, help="Retries of a failed turn.")] = 0,
    retry_delay: Annotated[float, typer.Option(min=0)] = 1.0,
    account_path: Annotated[
        str | None, typer.Option(help="GET path of a response's token account ({id}).")
    ] = None,
    admin_key: Annotated[str | None, typer.Option(help="Admin key for --account-path.")] = None,
    replica_header: ReplicaHeaderOption = None,
    label: Annotated[str, typer.Option(help="Name of this run in reports.")] = "",
    out: OutOption = Path("bench-results"),
    name: Annotated[str, typer.Option(help="Base name of the output files.")] = "agents",
    multi_agent: Annotated[
        bool,
        typer.Option(
            "--multi-agent",
            help="The multi-agent workload (our server's hosted multi-agent beta): --agents "
            "leads, --turns turns each, every turn spawning a subagent over the lead's "
            "history, --tool-seconds between turns; reads every agent's account (needs "
            "--admin-key).",
        ),
    ] = False,
    max_concurrent_subagents: Annotated[
        int, typer.Option(min=1, help="--multi-agent: multi_agent.max_concurrent_subagents.")
    ] = 2,
) -> None:
    """N concurrent agents, K tool-calling turns each: warm returns, hit ratio, TTFT."""
    if multi_agent:
        _multi_agent_run(
            url,
            api_key[0] if api_key else None,
            model,
            MultiAgentConfig(
                model=model or "",
                admin_key=admin_key or "",
                leads=agents,
                turns=turns,
                tool_seconds=tool_seconds,
                system_words=system_words,
                task_words=task_words,
                max_output_tokens=max_output_tokens,
                temperature=temperature,
                max_concurrent_subagents=max_concurrent_subagents,
                nonce=nonce,
            ),
            out,
            name,
        )
        return
    if chain not in ("previous_response_id", "conversation", "history"):
        raise typer.BadParameter(f"unknown --chain {chain!r}")
    if tool_choice not in ("named", "required", "auto"):
        raise typer.BadParameter(f"unknown --tool-choice {tool_choice!r}")
    target = _one_target(url, chain != "history", api_key, replica_header)
    chain_mode: Chain = chain  # type: ignore[assignment]
    choice: ToolChoice = tool_choice  # type: ignore[assignment]

    async def work(chosen: str) -> tuple[list[dict[str, Any]], AgentsConfig]:
        config = AgentsConfig(
            model=chosen,
            agents=agents,
            turns=turns,
            chain=chain_mode,
            stream=stream,
            tool_seconds=tool_seconds,
            think_seconds=think_seconds,
            jitter=jitter,
            ramp_seconds=ramp_seconds,
            tool_choice=choice,
            tools=tools,
            system_words=system_words,
            task_words=task_words,
            tool_output_words=tool_output_words,
            max_output_tokens=max_output_tokens,
            temperature=temperature,
            block_size=block_size,
            seed=seed,
            nonce=nonce,
            session_key=session_key,
            api_keys=tuple(api_key) if api_key else (None,),
            salt=salt,
            retries=retries,
            retry_delay=retry_delay,
            account_path=account_path,
            admin_key=admin_key,
        )
        return await run_agents(target, config), config

    rows, config = _run_on([target], model, work)
    result = {
        "command": "agents",
        "label": label or name,
        "url": url,
        "model": config.model,
        "config": {
            key: value
            for key, value in vars(config).items()
            if key not in ("api_keys", "admin_key", "model")
        },
        "tenants": len(config.api_keys),
        "machine": _machine(),
        "summary": summarize_agents(rows, config),
    }
    _echo_written(write_run(out, name, rows, result))
    typer.echo(json.dumps(result["summary"], indent=2, default=str))


def _multi_agent_run(
    url: str,
    api_key: str | None,
    model: str | None,
    config: MultiAgentConfig,
    out: Path,
    name: str,
) -> None:
    if not config.admin_key:
        raise typer.BadParameter("--multi-agent reads the agents' accounts: give --admin-key")
    target = Target("target", url, stateful=True, api_key=api_key)

    async def work(chosen_model: str) -> tuple[list[dict[str, Any]], MultiAgentConfig]:
        chosen = replace(config, model=chosen_model)
        return await run_multi_agent(target, chosen), chosen

    rows, used = _run_on([target], model, work)
    summary = summarize_multi_agent(rows)
    result = {
        "command": "agents --multi-agent",
        "url": url,
        "model": used.model,
        "config": {k: v for k, v in vars(used).items() if k not in ("admin_key", "model")},
        "machine": _machine(),
        "summary": summary,
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / f"{name}.md").write_text(multi_agent_table(rows, summary), encoding="utf-8")
    typer.echo(f"wrote {out / f'{name}.json'}\nwrote {out / f'{name}.md'}")
    typer.echo(multi_agent_table(rows, summary))


@bench_app.command("agents-report")
def agents_report(
    runs: Annotated[list[Path], typer.Argument(help="JSON files of bench agents runs.")],
    out: OutOption = Path("bench-results"),
    name: Annotated[str, typer.Option(help="Base name of the output files.")] = "agents_report",
) -> None:
    """One table (markdown, CSV) and one chart over several bench agents runs."""
    _echo_written(write_report(out, name, runs))
    typer.echo((out / f"{name}.md").read_text(encoding="utf-8"))


@bench_app.command("chart")
def chart(
    runs: Annotated[list[Path], typer.Argument(help="JSON files that bench commands wrote.")],
) -> None:
    """Draw each run's SVG again (NAME.svg beside NAME.json) with the current chart code,
    from the JSON and, for continuations, the CSV beside it."""
    for path in runs:
        try:
            typer.echo(f"wrote {redraw(path)}")
        except (OSError, ValueError, KeyError) as exc:
            typer.echo(f"error: {path}: {exc}", err=True)
            raise typer.Exit(1) from exc
