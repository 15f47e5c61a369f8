"""Relay one vLLM replica's KV events between two loopback ports (XSUB -> XPUB).

vLLM 0.32 binds its ZMQ publisher only for ``ipc://`` or a wildcard ``tcp://*:PORT`` (every
interface) and *connects* for ``tcp://127.0.0.1:PORT``; vllm-router 0.1.17's
``--kv-event-source`` takes ``tcp://HOST:PORT`` only and connects too. This relay binds
both sides on 127.0.0.1, so neither the replica nor the router listens on other
interfaces. Run it with the vLLM venv's Python (it has pyzmq):

    python scripts/bench/agents_kv_relay.py --publishers 19941 --subscribers 19951
"""

from __future__ import annotations

import argparse

import zmq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--publishers", type=int, required=True, help="vLLM connects here")
    parser.add_argument("--subscribers", type=int, required=True, help="the router connects here")
    args = parser.parse_args()
    context = zmq.Context()
    frontend = context.socket(zmq.XSUB)
    frontend.bind(f"tcp://127.0.0.1:{args.publishers}")
    backend = context.socket(zmq.XPUB)
    backend.bind(f"tcp://127.0.0.1:{args.subscribers}")
    zmq.proxy(frontend, backend)


if __name__ == "__main__":
    main()
