"""Which network interface reaches the rendezvous host: for Gloo across hosts.

Gloo, unless ``GLOO_SOCKET_IFNAME`` names an interface, listens on the address this host's name
resolves to. On many machines (Debian and Ubuntu write ``127.0.1.1 hostname`` into /etc/hosts,
containers often map the host name to 127.0.0.1) that is a loopback address, and a job across
hosts then fails in ``connectFullMesh`` with its peers advertising 127.0.x.1. The interface that
routes to ``MASTER_ADDR`` is the one the other hosts can reach; the kernel says which, without a
packet being sent, when a UDP socket is connected towards it.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct
from collections.abc import Mapping
from pathlib import Path

__all__ = ["GLOO_INTERFACE", "gloo_interface_for", "interface_towards"]

GLOO_INTERFACE = "GLOO_SOCKET_IFNAME"

_SIOCGIFADDR = 0x8915  # linux/sockios.h


def _ipv4_addresses() -> list[tuple[str, str]]:
    """(interface name, IPv4 address) for every interface that has one."""
    found: list[tuple[str, str]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            with contextlib.suppress(OSError):
                reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
                found.append((name, socket.inet_ntoa(reply[20:24])))
    return found


def _ipv6_addresses(proc: Path = Path("/proc/net/if_inet6")) -> list[tuple[str, str]]:
    """(interface name, IPv6 address) for every address Linux lists in /proc/net/if_inet6."""
    found: list[tuple[str, str]] = []
    with contextlib.suppress(OSError):
        for line in proc.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 6:
                found.append((fields[5], str(ipaddress.IPv6Address(bytes.fromhex(fields[0])))))
    return found


def interface_towards(host: str, port: int = 9) -> str | None:
    """The name of the local interface whose address this host uses to reach ``host``, or None
    where that cannot be told (unresolvable name, no route, not Linux)."""
    try:
        candidates = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, kind, protocol, _, address in candidates:
        try:
            with socket.socket(family, kind, protocol) as udp:
                udp.connect(address)  # chooses the route; sends nothing
                local = str(udp.getsockname()[0])
        except OSError:
            continue
        table = _ipv4_addresses() if family == socket.AF_INET else _ipv6_addresses()
        for name, address_of_name in table:
            if ipaddress.ip_address(address_of_name) == ipaddress.ip_address(local.split("%")[0]):
                return name
    return None


def gloo_interface_for(
    backend: str, master_addr: str | None, spans_hosts: bool, env: Mapping[str, str] | None = None
) -> str | None:
    """The interface to give Gloo, or None to leave Gloo's own choice: only when the process
    group uses Gloo, the ranks span hosts, and nobody has named an interface already."""
    import os

    environ = os.environ if env is None else env
    if "gloo" not in backend or not spans_hosts or not master_addr or GLOO_INTERFACE in environ:
        return None
    return interface_towards(master_addr)
