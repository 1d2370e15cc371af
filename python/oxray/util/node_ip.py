"""`get_node_ip_address`, as Ray's: the address other nodes know this process's node by,
which is what a task needs to tell peers where to reach a server it starts."""

import os
from typing import Optional

from oxray._private import worker

# Any routable address: connecting a UDP socket sends nothing, it only picks the interface.
_INTERNET = ("8.8.8.8", 53)


def get_node_ip_address(address: Optional[str] = None) -> str:
    """The IP of the node this process runs on: the one its node agent gave a worker, else
    the one this connected driver serves its objects on, else the one that reaches
    `address` (default: the cluster this process would join)."""
    ip = os.environ.get("OXRAY_NODE_IP")
    if ip:
        return ip
    if address is None and worker.is_initialized():
        host, _, _ = worker.client().owner_address().rpartition(":")
        return host.strip("[]")
    return _ip_reaching(address or os.environ.get("OXRAY_ADDRESS") or worker._current_address())


def _ip_reaching(address: Optional[str]) -> str:
    import socket  # only this fallback needs it; importing it costs every process ~7 ms

    target = _INTERNET
    if address:
        for scheme in ("oxray://", "ray://", "http://"):
            address = address[len(scheme):] if address.startswith(scheme) else address
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or port  # no port given: the whole thing is the host
        target = (host, int(port) if host != port and port.isdigit() else 6379)
    try:
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(target)
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"
