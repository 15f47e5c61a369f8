"""Run the simulator standalone: ``python -m tests.upstream_sim --port 8100``.

For subprocess tests, manual runs and multi-replica benchmarks. With ``--port 0`` the
chosen port is printed on the first line of stdout, so a parent process can read it.
Script it over HTTP through ``/_sim/push``, ``/_sim/reset``, ``/_sim/requests`` and
``/_sim/stats``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc

import uvicorn

from .exchange import Runtime
from .server import bind_socket, connection_closer, create_app, uvicorn_config
from .state import SimConfig, SimState


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.upstream_sim", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--model", default=SimConfig.model)
    parser.add_argument("--block-size", type=int, default=SimConfig.block_size)
    parser.add_argument("--max-model-len", type=int, default=SimConfig.max_model_len)
    parser.add_argument("--replica", default=None, help="reported in x-upstream-replica")
    parser.add_argument("--cache-capacity-blocks", type=int, default=None)
    parser.add_argument("--prefill-seconds-per-token", type=float, default=0.0)
    parser.add_argument("--decode-seconds-per-token", type=float, default=0.0)
    parser.add_argument("--default-reply-tokens", type=int, default=None)
    parser.add_argument(
        "--max-recordings", type=int, default=None, help="keep only the latest N requests"
    )
    parser.add_argument(
        "--no-gc-pauses",
        action="store_true",
        help="benchmarks: turn the garbage collector off (its pauses, ~60 ms once the "
        "process has served a few thousand requests, would land on whichever requests "
        "are in flight); cyclic garbage then stays for the life of the process",
    )
    parser.add_argument(
        "--kv-events-endpoint",
        default=None,
        help="publish vLLM-shaped KV events here (ipc:// is bound, tcp://host:port connected to)",
    )
    parser.add_argument("--kv-events-topic", default="", help="the topic naming this replica")
    parser.add_argument("--log-level", default="warning")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = SimConfig(
        model=args.model,
        block_size=args.block_size,
        max_model_len=args.max_model_len,
        replica=args.replica,
        cache_capacity_blocks=args.cache_capacity_blocks,
        prefill_seconds_per_token=args.prefill_seconds_per_token,
        decode_seconds_per_token=args.decode_seconds_per_token,
        default_reply_tokens=args.default_reply_tokens,
        max_recordings=args.max_recordings,
        kv_events_endpoint=args.kv_events_endpoint,
        kv_events_topic=args.kv_events_topic,
    )
    if args.no_gc_pauses:
        gc.disable()
    runtime = Runtime(SimState(config))
    server = uvicorn.Server(uvicorn_config(create_app(runtime), args.log_level))
    runtime.close_connection = connection_closer(server)
    sock = bind_socket(args.host, args.port)
    print(f"upstream-sim listening on http://{args.host}:{sock.getsockname()[1]}", flush=True)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()


if __name__ == "__main__":
    main()
