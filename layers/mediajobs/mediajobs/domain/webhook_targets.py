"""Where a webhook may be sent: the URL's form and the addresses its host may reach. Pure.

A webhook URL is ``https://``, or ``http://`` to a loopback name (a receiver on this
machine: ``mediajobs webhook listen``) -- never ``file:`` or another scheme
(:func:`checked_webhook_url`). Its host, a literal address or every address its name
resolves to at send time, must be one the public internet routes to
(:func:`target_refusal`): the dispatcher must not POST signed events to the instance
metadata service, into a private network, or to a service on its own machine (on Lambda,
127.0.0.1:9001 is the Runtime API, ``AWS_LAMBDA_RUNTIME_API``).

Refused, whatever the spelling:

* the cloud metadata endpoints (:data:`METADATA_ADDRESSES`), which no allow list admits;
* the blocks of the IANA IPv4 and IPv6 Special-Purpose Address Registries that are not
  "Globally Reachable" (RFC 6890 and the RFCs each entry cites:
  https://www.iana.org/assignments/iana-ipv4-special-registry,
  https://www.iana.org/assignments/iana-ipv6-special-registry), multicast (RFC 5771, RFC
  4291 section 2.7), the limited broadcast address and 240.0.0.0/4 (RFC 919, RFC 1112),
  and the IPv6 space the IETF reserves (https://www.iana.org/assignments/ipv6-address-space):
  :data:`SPECIAL_PURPOSE`, by name;
* anything else Python's :mod:`ipaddress` does not call global, or calls private,
  loopback, link-local, multicast, reserved, unspecified or site-local (a second net under
  the table: its lists change with Python's version, the table does not).

An IPv6 address that carries an IPv4 address to the IPv4 internet is judged by that IPv4
address (:func:`embedded_ipv4`): IPv4-mapped ``::ffff:0:0/96`` (RFC 4291 section 2.5.5.2),
the NAT64 well-known prefix ``64:ff9b::/96`` (RFC 6052 section 2.1) and 6to4 ``2002::/16``
(RFC 3056 section 2): ``::ffff:10.0.0.1`` is 10.0.0.1.

An operator admits networks the rule refuses (a receiver on a private network the
dispatcher can reach; locally, loopback) with an allow list of CIDRs
(:func:`parse_networks`; ``WEBHOOK_ALLOW_NETWORKS``, ``serve --webhook-allow-networks``).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Hosts a plain-HTTP webhook may name: a receiver on this machine (``mediajobs webhook listen``).
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})

#: Loopback (RFC 1122 section 3.2.1.3, RFC 4291 section 2.5.3): what ``mediajobs serve``
#: admits by default, for a ``mediajobs webhook listen`` beside it.
LOOPBACK_NETWORKS: Final = "127.0.0.0/8,::1/128"


def _ip(text: str) -> IPAddress:
    return ipaddress.ip_address(text)


#: The cloud metadata and credential endpoints, and what each is. Refused even inside an
#: admitted network: a signed POST there is never a webhook.
METADATA_ADDRESSES: Final[Mapping[IPAddress, str]] = {
    _ip("169.254.169.254"): "the instance metadata service (AWS IMDS; also GCP, Azure, OpenStack, Oracle Cloud)",
    _ip("fd00:ec2::254"): "the AWS instance metadata service over IPv6",
    _ip("169.254.170.2"): "the ECS task metadata and credentials endpoint",
    _ip("169.254.170.23"): "the EKS Pod Identity agent",
    _ip("fd00:ec2::23"): "the EKS Pod Identity agent over IPv6",
    _ip("100.100.100.200"): "the Alibaba Cloud metadata service",
    _ip("192.0.0.192"): "the Oracle Cloud Classic metadata service",
}


def _net(text: str) -> IPNetwork:
    return ipaddress.ip_network(text)


#: The refused blocks, most specific first, each with what it is and its source (the IANA
#: special-purpose registries' entries that are not globally reachable, RFC 6890).
SPECIAL_PURPOSE: Final[tuple[tuple[IPNetwork, str], ...]] = (
    (_net("0.0.0.0/8"), "'this network' (RFC 791; 0.0.0.0 is unspecified)"),
    (_net("10.0.0.0/8"), "a private network (RFC 1918)"),
    (_net("100.64.0.0/10"), "shared address space, carrier-grade NAT (RFC 6598)"),
    (_net("127.0.0.0/8"), "loopback (RFC 1122)"),
    (_net("169.254.0.0/16"), "link-local (RFC 3927)"),
    (_net("172.16.0.0/12"), "a private network (RFC 1918)"),
    (_net("192.0.0.0/24"), "IETF protocol assignments (RFC 6890)"),
    (_net("192.0.2.0/24"), "documentation, TEST-NET-1 (RFC 5737)"),
    (_net("192.88.99.0/24"), "the deprecated 6to4 relay anycast (RFC 7526)"),
    (_net("192.168.0.0/16"), "a private network (RFC 1918)"),
    (_net("198.18.0.0/15"), "benchmarking (RFC 2544)"),
    (_net("198.51.100.0/24"), "documentation, TEST-NET-2 (RFC 5737)"),
    (_net("203.0.113.0/24"), "documentation, TEST-NET-3 (RFC 5737)"),
    (_net("224.0.0.0/4"), "multicast (RFC 5771)"),
    (_net("255.255.255.255/32"), "the limited broadcast address (RFC 919)"),
    (_net("240.0.0.0/4"), "reserved (RFC 1112)"),
    (_net("::/128"), "the unspecified address (RFC 4291)"),
    (_net("::1/128"), "loopback (RFC 4291)"),
    (_net("64:ff9b:1::/48"), "local-use IPv4/IPv6 translation (RFC 8215)"),
    (_net("::/8"), "reserved by the IETF (IPv4-compatible and -translated forms included; RFC 4291)"),
    (_net("100::/64"), "discard-only (RFC 6666)"),
    (_net("2001:db8::/32"), "documentation (RFC 3849)"),
    (_net("2001::/23"), "IETF protocol assignments, Teredo and benchmarking included (RFC 2928)"),
    (_net("3fff::/20"), "documentation (RFC 9637)"),
    (_net("5f00::/16"), "segment routing SIDs (RFC 9602)"),
    (_net("fc00::/7"), "unique local, a private network (RFC 4193)"),
    (_net("fe80::/10"), "link-local (RFC 4291)"),
    (_net("fec0::/10"), "site-local, deprecated (RFC 3879)"),
    (_net("ff00::/8"), "multicast (RFC 4291)"),
)

#: Python's own judgement, checked after the table (``is_site_local``: IPv6 only).
_NOT_GLOBAL_PROPERTIES: Final = (
    "is_private",
    "is_loopback",
    "is_link_local",
    "is_multicast",
    "is_reserved",
    "is_unspecified",
    "is_site_local",
)

_NAT64: Final = _net("64:ff9b::/96")


@dataclass(frozen=True)
class TargetRefusal:
    """Why an address is no webhook target.

    Attributes
    ----------
    address: the address refused, as resolved or written (``::ffff:10.0.0.1``).
    why: what it is, with its block and source (``a private network (RFC 1918; 10.0.0.0/8)``).
    admissible: whether an allow list may admit it (``False``: a metadata endpoint).
    """

    address: IPAddress
    why: str
    admissible: bool = True


class WebhookTargetRefused(ValueError):
    """A webhook URL whose host is, or resolves to, an address :func:`target_refusal`
    refuses: permanent for that URL (the dispatcher keeps the notification in its
    on-failure destination with reason ``webhook_target_refused``, and never tries again).

    Attributes: ``host`` (the URL's host, as written), ``refusal`` (:class:`TargetRefusal`),
    ``resolved`` (``True``: the host is a name, and ``refusal.address`` one of its addresses).
    """

    def __init__(self, host: str, refusal: TargetRefusal, *, resolved: bool = False) -> None:
        resolved_to = f" resolves to {refusal.address}, which" if resolved else ""
        remedy = (
            "never a webhook target"
            if not refusal.admissible
            else "not a webhook target unless admitted (WEBHOOK_ALLOW_NETWORKS; mediajobs serve "
            "--webhook-allow-networks)"
        )
        super().__init__(f"the webhook URL's host {host}{resolved_to} is {refusal.why}: {remedy}")
        self.host = host
        self.refusal = refusal
        self.resolved = resolved


def parse_address(text: str) -> IPAddress:
    """The address ``text`` spells (``10.0.0.1``, ``fe80::1%eth0``: the zone is dropped,
    ``[::1]``: the brackets are).

    Raises
    ------
    ValueError
        Not an IPv4 or IPv6 address.
    """
    return ipaddress.ip_address(text.strip().strip("[]").split("%", 1)[0])


def literal_address(host: str) -> IPAddress | None:
    """The address a URL's host is, when it is one (``10.0.0.1``, ``::1``); ``None`` for a name."""
    try:
        return parse_address(host)
    except ValueError:
        return None


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """The networks of a comma-separated list of CIDRs (``10.20.0.0/16, fd12::/48``; an
    address alone is its /32 or /128); empty parts are skipped, an empty text is none.

    Raises
    ------
    ValueError
        A part that is not a network, or has host bits set (``10.0.0.1/8``: write ``10.0.0.0/8``).
    """
    networks = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            networks.append(ipaddress.ip_network(part.strip()))
        except ValueError as exc:
            raise ValueError(f"not a network (CIDR, e.g. 10.20.0.0/16 or fd12::/48): {part.strip()!r}: {exc}") from None
    return tuple(networks)


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 ``address`` carries traffic to, or ``None``: IPv4-mapped
    (``::ffff:a.b.c.d``, RFC 4291 section 2.5.5.2), NAT64's well-known prefix
    (``64:ff9b::a.b.c.d``, RFC 6052 section 2.1), 6to4 (``2002:AABB:CCDD::/48``, RFC 3056)."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def target_refusal(address: IPAddress | str, allowed: Iterable[IPNetwork] = ()) -> TargetRefusal | None:
    """Why a webhook may not be sent to ``address``, or ``None`` when it may.

    ``address`` is judged by the IPv4 address it embeds, if any (:func:`embedded_ipv4`).
    A metadata endpoint (:data:`METADATA_ADDRESSES`) is always refused; an address inside
    one of ``allowed`` (either spelling of it) is admitted; else one in
    :data:`SPECIAL_PURPOSE`, or one :mod:`ipaddress` does not call global, is refused.

    Raises
    ------
    ValueError
        ``address`` is a string that is not an address.
    """
    ip = parse_address(address) if isinstance(address, str) else address
    inner = embedded_ipv4(ip)
    reached = inner or ip
    carried = f" (carrying IPv4 {inner})" if inner is not None else ""
    for candidate in (ip, reached):
        if candidate in METADATA_ADDRESSES:
            return TargetRefusal(ip, METADATA_ADDRESSES[candidate] + carried, admissible=False)
    if any(candidate in network for network in allowed for candidate in (ip, reached)):
        return None
    why = _not_global(reached)
    return TargetRefusal(ip, why + carried) if why else None


def _not_global(address: IPAddress) -> str | None:
    """What a non-global ``address`` is, or ``None`` for a global one."""
    for network, name in SPECIAL_PURPOSE:
        if address in network:
            return f"{name[:-1]}; {network})" if name.endswith(")") else f"{name} ({network})"
    found = [name for name in _NOT_GLOBAL_PROPERTIES if getattr(address, name, False)]
    if found or not address.is_global:
        return "not globally reachable (Python's ipaddress: " + ", ".join(found or ["not is_global"]) + ")"
    return None


#: The loopback names ``http://`` may reach, as the refusal lists them.
_LOOPBACK_WORDS: Final = "a loopback name: " + ", ".join(sorted(LOOPBACK_HOSTS))


def checked_webhook_url(url: str, *, allowed: Iterable[IPNetwork] = ()) -> str:
    """``url`` if a webhook may be sent there by its form: ``https://`` with a host, or
    ``http://`` to a loopback name (:data:`LOOPBACK_HOSTS`); and, when the host is a literal
    address, one :func:`target_refusal` admits with ``allowed``. A name's addresses are
    checked when it is resolved (``adapters/webhooks.py``, at each POST).

    Raises
    ------
    WebhookTargetRefused
        The host is a refused address (``https://169.254.169.254/``, ``https://10.0.0.1/``).
    ValueError
        Any other scheme (``file:``, ``ftp:``), ``http://`` to another host, no host.
    """
    parts = urllib.parse.urlsplit(url)
    try:
        host = parts.hostname
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise ValueError(f"a webhook URL is https:// (or http:// to {_LOOPBACK_WORDS}), not {url!r}") from None
    if not host or not (parts.scheme == "https" or (parts.scheme == "http" and host in LOOPBACK_HOSTS)):
        raise ValueError(f"a webhook URL is https:// (or http:// to {_LOOPBACK_WORDS}), not {url!r}")
    address = literal_address(host)
    if address is not None and (refusal := target_refusal(address, tuple(allowed))) is not None:
        raise WebhookTargetRefused(host, refusal)
    return url
