"""The address guard: refuse private, loopback, link-local (and other non-global) targets unless
they are allowed. Checked on every hop of a redirect chain, on the resolved addresses.

``HttpFetcher`` applies it twice over: an IP-literal host is checked before each hop's connection,
and a host name is checked on the addresses its resolver returns -- the very addresses the connection
then uses, so a DNS answer cannot change between the check and the connect (no rebinding window).
``allowed_networks`` lets selected private networks through (``("127.0.0.1/32",)`` for a local demo)
while every other private address stays refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from functools import lru_cache

from crawlherd.errors import AddressNotAllowedError

__all__ = ["address_allowed", "check_address", "is_public_address", "parse_networks", "refusal"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix: the last 32 bits are IPv4
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215 local-use NAT64: never global
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated IPv4-compatible form ::a.b.c.d (::7f00:1)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, when it is one of the forms that reach an IPv4
    host: IPv4-mapped (``::ffff:127.0.0.1``), IPv4-compatible (``::7f00:1``), NAT64
    (``64:ff9b::7f00:1``), 6to4 (``2002:7f00:1::``) and Teredo (the client address)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _V4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are themselves
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


@lru_cache(maxsize=4096)
def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address to judge: an IPv6 form of an IPv4 address is judged as that IPv4 address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        return _embedded_ipv4(ip) or ip
    return ip


def is_public_address(address: str) -> bool:
    """True for a globally routable address. An IPv6 address that embeds an IPv4 one (mapped,
    compatible, NAT64, 6to4, Teredo) is public only when that IPv4 address is; local-use NAT64
    (``64:ff9b:1::/48``) never is."""
    ip = _ip(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip in _NAT64_LOCAL:
        return False
    return ip.is_global and not ip.is_multicast


def parse_networks(networks: Iterable[str]) -> tuple[Network, ...]:
    """``("127.0.0.1/32", "10.0.0.0/8")`` as network objects; a bad one raises ValueError naming it."""
    out: list[Network] = []
    for net in networks:
        try:
            out.append(ipaddress.ip_network(net, strict=False))
        except ValueError as exc:
            raise ValueError(f"allowed network {net!r} is not an IP network ({exc})") from None
    return tuple(out)


def address_allowed(address: str, networks: tuple[Network, ...] = ()) -> bool:
    """True when ``address`` is public or inside one of ``networks``."""
    if is_public_address(address):
        return True
    ip = _ip(address)
    return any(ip.version == net.version and ip in net for net in networks)


def refusal(url: str, host: str, address: str) -> AddressNotAllowedError:
    """The error the guard raises, with a message that says how to allow the address."""
    return AddressNotAllowedError(
        f"{url}: {host} resolves to {address}, a private/loopback/link-local address; "
        "pass allow_private_addresses=True (or --allow-private) to crawl it",
        url=url,
    )


async def check_address(
    host: str, port: int, *, url: str, allow_private: bool, allowed_networks: tuple[Network, ...] = ()
) -> None:
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
        if not address_allowed(address, allowed_networks):
            raise refusal(url, host, address)
