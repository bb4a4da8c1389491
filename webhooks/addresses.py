"""Where a webhook may point: the document fetch's URL rules, and public addresses only.

The URL's form is memory.parts.check_url's (http or https, plain ASCII, a host name or IP, no
user name or password, at most 2048 characters), the same as a document URL's. Then every
address its host resolves to must be a public one: loopback, private, link-local (the cloud
metadata service), multicast, reserved and unspecified addresses are refused, unless the
operator lists the URL's host (and port) in ENGRAM_FETCH_ALLOWED_HOSTS, the hosts engram may
reach on a caller's behalf (memory.parts.may_fetch). Checked when a webhook is created or
changed, and again at each delivery, which connects to the address it checked (DNS can
change between the check and the connection).
"""

from __future__ import annotations

import ipaddress
import socket

from memory.parts import PartError, check_url, host_and_port, may_fetch


class UrlError(ValueError):
    """A webhook URL engram will not POST to (a 400 at the API; a failed attempt later)."""


# IPv6 ranges that carry an IPv4 address a router may reach: NAT64 (RFC 6052, RFC 8215),
# 6to4, and the deprecated IPv4-compatible form. Python calls some of them global.
_CARRIES_IPV4 = tuple(
    ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "::/96")
)


def public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A public address: global and not multicast, and for IPv6 not one that carries an IPv4
    address (whose IPv4 address could be loopback or private)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return public(address.ipv4_mapped)
        if any(address in network for network in _CARRIES_IPV4):
            return False
    # Python calls multicast addresses (224.0.0.0/4, ff00::/8) global, even link-local ones:
    # a group address reaches whoever joined it on the server's network, never one receiver.
    return address.is_global and not address.is_multicast


def check_webhook_url(url: str) -> str:
    """The URL, if engram may POST to it now; else UrlError saying why."""
    try:
        check_url(url, "url")
    except PartError as exc:
        raise UrlError(str(exc)) from None
    addresses(url)
    return url


def addresses(url: str) -> list[str]:
    """The addresses of the (checked) URL's host that engram may connect to, in resolver order.

    UrlError when the host does not resolve, or resolves to any address that is not public
    (one bad address refuses them all: the resolver may return it first another time).
    """
    host, port = host_and_port(url)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UrlError(f"url: the host {host} cannot be resolved.") from None
    resolved = list(dict.fromkeys(str(info[4][0]) for info in found))
    if not resolved:
        raise UrlError(f"url: the host {host} cannot be resolved.")
    if may_fetch(url):
        return resolved
    for address in resolved:
        if not public(ipaddress.ip_address(address.split("%")[0])):
            raise UrlError(
                f"url: {host} resolves to {address}, a loopback, private, link-local, multicast "
                "or reserved address; an operator may allow the host in "
                "ENGRAM_FETCH_ALLOWED_HOSTS."
            )
    return resolved
