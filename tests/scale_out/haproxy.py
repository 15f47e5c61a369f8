"""HAProxy in front of the gateway replicas, from a generated configuration on loopback.

It checks each gateway's ``/ready`` every second (two failures take it out, two successes
put it back), retries a connection that was refused on another gateway (``redispatch``:
a request never reached the dead one), and names the gateway that answered in an
``X-Gateway`` header, so the load driver can tell which replica served what. With
``affinity`` requests carrying ``X-Affinity-Key`` hash onto one gateway (``hash-type
consistent``: a gateway leaving moves only its own share), as session affinity at the
load balancer would.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

AFFINITY_HEADER = "X-Affinity-Key"


def haproxy_config(port: int, gateways: dict[str, int], *, affinity: bool) -> str:
    balance = (
        f"balance hdr({AFFINITY_HEADER})\n    hash-type consistent"
        if affinity
        else "balance roundrobin"
    )
    servers = "\n".join(
        f"    server {name} 127.0.0.1:{gw_port} check" for name, gw_port in gateways.items()
    )
    return f"""global
    maxconn 4096

defaults
    mode http
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    timeout http-request 30s
    retries 3
    option redispatch

frontend gateways_in
    bind 127.0.0.1:{port}
    default_backend gateways

backend gateways
    {balance}
    option httpchk GET /ready
    http-check expect status 200
    default-server inter 1s fall 2 rise 2
    http-response set-header X-Gateway %[srv_name]
{servers}
"""


class HAProxy:
    def __init__(self, folder: Path, port: int, gateways: dict[str, int], *, affinity: bool):
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.url = f"http://127.0.0.1:{port}"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "haproxy.cfg"
        config.write_text(haproxy_config(port, gateways, affinity=affinity))
        subprocess.run([binary, "-c", "-q", "-f", str(config)], check=True)
        self.log = folder / "haproxy.log"
        with self.log.open("wb") as sink:
            # -db: stay in the foreground, so the process is ours to stop.
            self.popen = subprocess.Popen(
                [binary, "-db", "-f", str(config)], stdout=sink, stderr=subprocess.STDOUT
            )

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
