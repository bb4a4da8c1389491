"""Which addresses a webhook may reach: public ones only, IPv6 forms of IPv4 addresses too."""

from __future__ import annotations

import ipaddress

import pytest

from webhooks.addresses import public


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("169.254.169.254", False),
        ("::1", False),
        ("fe80::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("::ffff:93.184.216.34", True),  # IPv4-mapped public
        ("::127.0.0.1", False),  # IPv4-compatible (deprecated)
        ("64:ff9b::a01:203", False),  # NAT64 of 10.1.2.3
        ("64:ff9b::5db8:d822", False),  # NAT64 of a public address: refused all the same
        ("2002:7f00:1::1", False),  # 6to4 of 127.0.0.1
        ("224.0.0.1", False),  # multicast: every host of the network
        ("239.1.2.3", False),  # multicast, administratively scoped
        ("ff02::1", False),  # IPv6 multicast, link-local: every node
        ("ff0e::1", False),  # IPv6 multicast, global scope
        ("::ffff:224.0.0.1", False),  # IPv4-mapped multicast
    ],
)
def test_only_public_addresses_are_reachable(address: str, allowed: bool) -> None:
    assert public(ipaddress.ip_address(address)) is allowed
