"""``redis+cluster://[user:password@]host:port,host:port/...``: the part of the URL that names the nodes.

Shared by the frontier and the broker on a Redis Cluster, which both take any number of nodes to start
from (one reachable node is enough: the cluster tells where the others are).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

__all__ = ["ClusterAddress", "cluster_address"]


@dataclass(frozen=True)
class ClusterAddress:
    """The start-up nodes of a cluster, and the credentials (None when not given)."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None


def cluster_address(netloc: str) -> ClusterAddress:
    """Parse ``[user:password@]host:port,host:port``; ValueError names the part that is not ``host:port``."""
    auth, _, hosts = netloc.rpartition("@")
    user, _, password = auth.partition(":")
    nodes = []
    for part in hosts.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{part!r} is not host:port")
        nodes.append((host.strip("[]"), int(port)))
    return ClusterAddress(tuple(nodes), unquote(user) or None, unquote(password) or None)
