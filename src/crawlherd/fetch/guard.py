"""The address guard: refuse private, loopback, link-local (and other non-global) targets unless
they are allowed. Checked on every hop of a redirect chain, on the resolved addresses."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

from crawlherd.errors import AddressNotAllowedError

__all__ = ["check_address", "is_public_address"]


def is_public_address(address: str) -> bool:
    """True for a globally routable address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_address(host: str, port: int, *, url: str, allow_private: bool) -> None:
    """Raise AddressNotAllowedError when ``host`` resolves to a non-public address and those are not
    allowed. Does nothing when they are allowed."""
    if allow_private:
        return
    host = host.strip("[]")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # unresolvable: the fetch itself will fail with a clear connection error
    for info in infos:
        address = str(info[4][0])
        if not is_public_address(address):
            raise AddressNotAllowedError(
                f"{url}: {host} resolves to {address}, a private/loopback/link-local address; "
                "pass allow_private_addresses=True (or --allow-private) to crawl it",
                url=url,
            )
