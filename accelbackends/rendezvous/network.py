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

__all__ = [
    "GLOO_INTERFACE",
    "RESOLVE_TIMEOUT",
    "PortWatch",
    "connections_to",
    "gloo_interface_for",
    "interface_towards",
    "is_local_address",
    "is_this_host",
    "listening",
    "master_addr_problem",
    "resolve",
]

GLOO_INTERFACE = "GLOO_SOCKET_IFNAME"

_SIOCGIFADDR = 0x8915  # linux/sockios.h
#: How long a name lookup may take before the name counts as unresolvable, seconds.
RESOLVE_TIMEOUT = 10.0

# linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h, netinet/tcp.h
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST_DUMP = 0x1 | 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_TCPF_LISTEN = 1 << 10
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr


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


def master_addr_problem(
    value: str, source: str = "MASTER_ADDR", *, check_resolves: bool = True
) -> str | None:
    """What is wrong with ``value`` as rank 0's address, in one line, or None: whitespace, IPv6
    brackets, or (with ``check_resolves``) a name that does not resolve on this host. For
    ``info`` and the rendezvous."""
    said = _said(value, source)
    if value != value.strip() or any(c.isspace() for c in value):
        return f"{said} contains whitespace; give the bare host name or address"
    if not value:
        return f"{said} is empty; give rank 0's host name or address"
    if value.startswith("[") or value.endswith("]"):
        return (
            f"{said} has brackets; write IPv6 addresses without them "
            f"(MASTER_ADDR={value.strip('[]')})"
        )
    if check_resolves and resolve(value) is None:
        return f"{said} does not resolve here; set MASTER_ADDR to rank 0's host name or address"
    return None


def _said(value: str, source: str) -> str:
    if source.endswith(" (first host)"):
        return f"the first host of {source.removesuffix(' (first host)')}, {value!r},"
    if source.isidentifier() and source.isupper():
        return f"{source}={value!r}"
    return f"rank 0's address {value!r} (from {source})"


def resolve(host: str, timeout: float = RESOLVE_TIMEOUT) -> list[str] | None:
    """The addresses ``host`` resolves to, or None when it does not resolve within ``timeout``
    seconds (a resolver that hangs must not hold the rendezvous past its own timeout).

    The look-up runs through `accelbackends.host.guard`; one given up on stays there, recorded, in
    the C library (no torch frame), where the interpreter's shutdown can end it safely."""
    from ..host.guard import PluginTimeout, bounded

    if _is_address_literal(host):
        # The usual MASTER_ADDR of a single node: parsed, never looked up, so no thread is
        # started for it (two per init() on rank 0, each a wait for a core on a busy host).
        try:
            numeric = socket.getaddrinfo(
                host, None, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
            )
        except (OSError, UnicodeError):
            return None
        return [str(info[4][0]) for info in numeric] or None

    def lookup() -> list[str]:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return [str(info[4][0]) for info in infos]

    try:
        return bounded(lookup, timeout, f"resolving {host!r}") or None
    except (PluginTimeout, OSError, UnicodeError):
        return None


def _is_address_literal(host: str) -> bool:
    """An IPv4 address in dotted quad or an IPv6 address (with a zone or not): nothing to look
    up. Other spellings that resolve to an address (``127.1``) go to the resolver, as before."""
    for family, text in ((socket.AF_INET, host), (socket.AF_INET6, host.split("%", 1)[0])):
        try:
            socket.inet_pton(family, text)
        except (OSError, ValueError):
            continue
        return True
    return False


def is_local_address(address: str) -> bool:
    """True when this host owns ``address`` (it can bind a socket to it)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address.split("%")[0], 0))
    except OSError:
        return False
    return True


def is_this_host(host: str) -> bool:
    """True when ``host`` is certainly this network namespace: ``localhost``, or an address
    literal that a socket here can bind (a connection to it can only reach a listener here).
    Names are not resolved (a look-up may wait on DNS), so they count as elsewhere; so does this
    host's own name, which a container's hosts file may map to an address of another."""
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return is_local_address(host)


def listening(port: int) -> bool | None:
    """Whether a TCP socket of this network namespace listens on ``port``, asked of the kernel
    with a sock_diag dump of listening sockets only (as ``ss -lt`` asks): no connection is
    made, and the cost does not grow with the host's other connections (about 0.1 ms for both
    address families). None where the kernel cannot be asked (not Linux, no sock_diag)."""
    family_netlink = getattr(socket, "AF_NETLINK", None)
    if family_netlink is None:
        return None
    try:
        with socket.socket(family_netlink, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(1.0)
            return any(
                port in _listening_ports(diag, family)
                for family in (socket.AF_INET, socket.AF_INET6)
            )
    except OSError:
        return None


def _listening_ports(diag: socket.socket, family: int) -> set[int]:
    # struct inet_diag_req_v2: family, protocol, extensions, pad, states, then a zero sockid.
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, _TCPF_LISTEN) + bytes(48)
    diag.send(
        _HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST_DUMP, 1, 0)
        + request
    )
    ports: set[int] = set()
    while True:
        data = diag.recv(65536)
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
            if kind == _NLMSG_DONE:
                return ports
            if kind == _NLMSG_ERROR or length < _HEADER.size:
                raise OSError("sock_diag refused the request")
            if kind == _SOCK_DIAG_BY_FAMILY:
                # struct inet_diag_msg: 4 bytes, then the sockid, whose source port comes first.
                ports.add(struct.unpack_from("!H", data, offset + _HEADER.size + 4)[0])
            offset += (length + 3) & ~3


#: /proc/net/tcp's states: ESTABLISHED, TIME_WAIT, LISTEN.
_ESTABLISHED, _TIME_WAIT, _LISTEN = "01", "06", "0A"


def connections_to(port: int, proc: Path = Path("/proc/net")) -> list[str]:
    """``address:port`` of every established TCP connection to local ``port`` (Linux; empty
    elsewhere): who is talking to the rendezvous store."""
    return [peer for peer, state in _sockets_of(port, proc) if state == _ESTABLISHED]


def _sockets_of(port: int, proc: Path) -> list[tuple[str, str]]:
    """``(peer address:port, state)`` of every TCP socket on this host at local ``port`` but
    the listening one, and of every socket of this host's in TIME_WAIT towards ``port`` (a
    client here that connected and closed first: its side keeps the trace for a minute)."""
    found: list[tuple[str, str]] = []
    for name, width in (("tcp", 4), ("tcp6", 16)):
        with contextlib.suppress(OSError):
            for line in (proc / name).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) < 4 or fields[3] == _LISTEN:
                    continue
                local, remote, state = fields[1], fields[2], fields[3]
                if int(local.rsplit(":", 1)[1], 16) == port:
                    peer = remote
                elif state == _TIME_WAIT and int(remote.rsplit(":", 1)[1], 16) == port:
                    peer = local
                else:
                    continue
                address, peer_port = peer.rsplit(":", 1)
                found.append((f"{_proc_address(address, width)}:{int(peer_port, 16)}", state))
    return found


class PortWatch:
    """The connections made to a local ``port`` while rank 0 waits for the ranks, sampled now
    and then: a flood of connections that are opened and closed at once (few open at any
    moment) shows only as many different peers over the wait. Those there before the watch
    began (a previous cycle's, still in TIME_WAIT) are left out."""

    def __init__(self, port: int, proc: Path = Path("/proc/net")) -> None:
        self.port = port
        self._proc = proc
        self._before = {peer for peer, _ in _sockets_of(port, proc)}
        self.seen: set[str] = set()
        self.peak = 0

    def sample(self) -> None:
        sockets = _sockets_of(self.port, self._proc)
        self.peak = max(self.peak, sum(state == _ESTABLISHED for _, state in sockets))
        self.seen.update(peer for peer, _ in sockets if peer not in self._before)


def _proc_address(hexadecimal: str, width: int) -> str:
    raw = bytes.fromhex(hexadecimal)
    # /proc prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words if width == 16 else words[:4])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return str(address.ipv4_mapped)
    return str(address)
