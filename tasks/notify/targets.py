"""Where a channel may post: public internet addresses only, unless the channel allows a
private one (`add_channel --allow-private`, the admin's "Allow a private address").

Without this, whoever can make a channel makes Onlooker post, from inside its network, to
what trusts that network: a cloud's metadata service (169.254.169.254), an admin page on
loopback, Redis on ::1. The rule is checked twice:

- when a channel is made (`channels.add`): an IP literal, or every address its host resolves
  to now, must be public, or nothing is made. A name that does not resolve yet is accepted:
  the send checks again.
- on every new connection (`PublicOnlyBackend`, under the sender's HTTP client): the host is
  resolved once, every address it resolves to must be public, and the connection goes to
  one of exactly those addresses. There is no second lookup between the check and the
  connect, so a name that answers a public address to the check and a private one to the
  connect (DNS rebinding) gains nothing. The URL keeps its host name, so the Host header,
  TLS's SNI and the certificate check are the name's, as without the check.

Email channels are not checked: their SMTP server is the operator's setting, not a channel's.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

import httpcore

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_CARRIER_GRADE_NAT = ipaddress.ip_network("100.64.0.0/10")
# RFC 1918 and IPv6 unique local addresses: named "private" apart from the other
# non-public ranges Python's `is_private` also counts (documentation, benchmarking).
_PRIVATE = [
    ipaddress.ip_network(net) for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
] + [ipaddress.ip_network("fc00::/7")]
# NAT64's well-known prefix carries an IPv4 address in its last 32 bits: on a network with a
# NAT64 gateway, 64:ff9b::a9fe:a9fe reaches 169.254.169.254.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class Refused(Exception):
    """A target that is not a public address. `reason` is what members may read ("a
    loopback address"); `host` and `address` are for the admin and the logs."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        super().__init__(f"{host} is {reason} ({address})" if host != address else reason)
        self.host = host
        self.address = address
        self.reason = reason


def refusal(address: Address) -> str | None:
    """Why a channel may not post to the address ("a loopback address"), None if it is
    public. Python's `is_global` alone is not enough: it calls multicast and IPv6 site-local
    addresses global, and an IPv6 address may carry an IPv4 one that is what it reaches."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        return refusal(embedded)
    if address.is_unspecified:  # 0.0.0.0 and :: reach this machine on Linux
        return "an unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address in _CARRIER_GRADE_NAT:
        return "a carrier-grade NAT address"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "a site-local address"
    if any(address in net for net in _PRIVATE if net.version == address.version):
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "a non-public address"
    return None


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (IPv4-mapped, 6to4, NAT64), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def literal(host: str) -> Address | None:
    """The host as an IP address when it is written as one (with or without brackets and
    an IPv6 zone), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def resolve(host: str, port: int) -> list[str]:
    """Every address the host resolves to for a TCP connection, in the resolver's order,
    once each. socket.gaierror when it resolves to nothing."""
    found: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        if sockaddr[0] not in found:
            found.append(sockaddr[0])
    return found


def check(host: str, addresses: Iterable[str]) -> None:
    """Refused unless every one of the host's addresses is public: one private address among
    public ones is enough for a resolver (or whoever answers it) to pick it."""
    for text in addresses:
        reason = refusal(ipaddress.ip_address(text.split("%", 1)[0]))
        if reason is not None:
            raise Refused(host, text, reason)


def check_new(host: str, port: int) -> None:
    """At a channel's making: Refused if the host is, or resolves now to, a non-public
    address. A name that resolves to nothing is let through (DNS may not be set up yet): the
    send checks again, on the address it connects to."""
    address = literal(host)
    if address is not None:
        check(host, [str(address)])
        return
    try:
        addresses = resolve(host, port)
    except (socket.gaierror, UnicodeError):
        return
    check(host, addresses)


class PublicOnlyBackend(httpcore.SyncBackend):
    """httpcore's network backend, but a connection goes only to an address that was checked
    public, resolved once (see the module's docstring). Raises Refused otherwise, which
    the sender's transport (outbound_http) passes through unchanged."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = resolve(host, port)
        except (socket.gaierror, UnicodeError) as error:
            raise httpcore.ConnectError(f"could not resolve {host}: {error}") from None
        check(host, addresses)
        failure: Exception | None = None
        for address in addresses:  # in order, like socket.create_connection
            try:
                # An IP literal: the connect makes no DNS query of its own.
                return super().connect_tcp(
                    address, port, timeout, local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        raise failure or httpcore.ConnectError(f"{host} has no address")
