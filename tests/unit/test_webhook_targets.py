"""Where a webhook may be sent (``domain/webhook_targets.py``), as a table: the metadata
endpoints, every private range, shared address space, link-local, loopback, multicast,
broadcast, reserved and documentation blocks refused, IPv4 carried in IPv6 judged as the
IPv4 it is, a public address accepted; an allow list admits what the rule refuses, but
never a metadata endpoint; the settings refuse a literal address at start."""

from __future__ import annotations

import pytest

from mediajobs.domain.webhook_targets import (
    LOOPBACK_NETWORKS,
    WebhookTargetRefused,
    checked_webhook_url,
    embedded_ipv4,
    parse_address,
    parse_networks,
    target_refusal,
)
from mediajobs.settings import Settings

REFUSED = [
    # metadata endpoints (never admissible)
    ("169.254.169.254", "instance metadata service"),
    ("fd00:ec2::254", "metadata service over IPv6"),
    ("169.254.170.2", "ECS task metadata"),
    ("fd00:ec2::23", "EKS Pod Identity"),
    ("100.100.100.200", "Alibaba Cloud metadata"),
    ("::ffff:169.254.169.254", "instance metadata service"),
    ("64:ff9b::169.254.169.254", "instance metadata service"),
    # private networks
    ("10.0.0.1", "private network (RFC 1918; 10.0.0.0/8)"),
    ("10.255.255.255", "private network"),
    ("172.16.0.1", "private network (RFC 1918; 172.16.0.0/12)"),
    ("172.31.255.254", "private network"),
    ("192.168.1.1", "private network (RFC 1918; 192.168.0.0/16)"),
    ("fc00::1", "unique local"),
    ("fd12:3456::1", "unique local"),
    # shared address space (carrier-grade NAT)
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"),
    # link-local
    ("169.254.1.1", "link-local (RFC 3927"),
    ("fe80::1", "link-local (RFC 4291"),
    ("fe80::1%eth0", "link-local"),
    # IPv4 carried in IPv6: judged as the IPv4 address
    ("::ffff:10.0.0.1", "private network (RFC 1918; 10.0.0.0/8) (carrying IPv4 10.0.0.1)"),
    ("::ffff:127.0.0.1", "loopback (RFC 1122; 127.0.0.0/8) (carrying IPv4 127.0.0.1)"),
    ("64:ff9b::10.0.0.1", "carrying IPv4 10.0.0.1"),
    ("2002:c0a8:101::1", "private network (RFC 1918; 192.168.0.0/16) (carrying IPv4 192.168.1.1)"),
    ("::10.0.0.1", "reserved by the IETF"),  # IPv4-compatible, deprecated
    ("64:ff9b:1::a00:1", "local-use IPv4/IPv6 translation"),
    # loopback, unspecified
    ("127.0.0.1", "loopback"),
    ("127.1.2.3", "loopback"),
    ("::1", "loopback (RFC 4291"),
    ("0.0.0.0", "'this network'"),
    ("0.1.2.3", "'this network'"),
    ("::", "unspecified"),
    # multicast, broadcast, reserved
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("255.255.255.255", "limited broadcast"),
    ("240.0.0.1", "reserved (RFC 1112"),
    # documentation, benchmarking, IETF assignments, deprecated site-local
    ("192.0.2.1", "documentation"),
    ("198.51.100.1", "documentation"),
    ("203.0.113.1", "documentation"),
    ("2001:db8::1", "documentation (RFC 3849"),
    ("3fff::1", "documentation (RFC 9637"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.0.9", "IETF protocol assignments"),
    ("2001::1", "IETF protocol assignments"),  # Teredo
    ("fec0::1", "site-local"),
    ("5f00::1", "segment routing"),
]

ACCEPTED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",  # IPv4-mapped: the public IPv4 address
    "64:ff9b::8.8.8.8",  # NAT64 of a public address (an IPv6-only network's way there)
]


@pytest.mark.parametrize(("address", "why"), REFUSED)
def test_an_address_no_webhook_is_sent_to_is_refused_saying_what_it_is(address, why):
    refusal = target_refusal(address)
    assert refusal is not None, address
    assert why in refusal.why
    assert refusal.address == parse_address(address)


@pytest.mark.parametrize("address", ACCEPTED)
def test_a_public_address_is_accepted(address):
    assert target_refusal(address) is None


@pytest.mark.parametrize(
    "address", ["169.254.169.254", "fd00:ec2::254", "169.254.170.2", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe"]
)
def test_a_metadata_endpoint_is_refused_whatever_network_is_admitted(address):
    everything = parse_networks("0.0.0.0/0,::/0,169.254.0.0/16,fd00::/8")
    refusal = target_refusal(address, everything)
    assert refusal is not None and refusal.admissible is False


def test_loopback_is_refused_unless_admitted():
    loopback = parse_networks(LOOPBACK_NETWORKS)
    for address in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"):
        assert target_refusal(address) is not None, address
        assert target_refusal(address, loopback) is None, address
    assert target_refusal("10.0.0.1", loopback) is not None  # loopback admits loopback only


def test_an_admitted_network_admits_its_addresses_in_either_spelling_and_no_other():
    private = parse_networks("10.20.0.0/16")
    assert target_refusal("10.20.3.4", private) is None
    assert target_refusal("::ffff:10.20.3.4", private) is None
    assert target_refusal("10.21.0.1", private) is not None
    assert target_refusal("192.168.1.1", private) is not None


def test_the_ipv4_an_ipv6_address_carries():
    assert str(embedded_ipv4(parse_address("::ffff:10.0.0.1"))) == "10.0.0.1"
    assert str(embedded_ipv4(parse_address("64:ff9b::a9fe:a9fe"))) == "169.254.169.254"
    assert str(embedded_ipv4(parse_address("2002:0a00:0001::5"))) == "10.0.0.1"
    assert embedded_ipv4(parse_address("2606:4700::1")) is None
    assert embedded_ipv4(parse_address("10.0.0.1")) is None


def test_an_allow_list_is_comma_separated_cidrs():
    assert parse_networks("") == ()
    assert [str(n) for n in parse_networks(" 10.0.0.0/8 , fd12::/48,,192.0.2.7")] == [
        "10.0.0.0/8",
        "fd12::/48",
        "192.0.2.7/32",
    ]
    for bad in ("10.0.0.1/8", "nope", "10.0.0.0/33"):
        with pytest.raises(ValueError, match="not a network"):
            parse_networks(bad)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        (
            "https://169.254.169.254/latest/meta-data/",
            "the webhook URL's host 169.254.169.254 is the instance metadata service",
        ),
        ("https://10.0.0.1/", "the webhook URL's host 10.0.0.1 is a private network (RFC 1918; 10.0.0.0/8)"),
        ("https://[::ffff:10.0.0.1]/", "carrying IPv4 10.0.0.1"),
        ("https://[fd00:ec2::254]/", "metadata service over IPv6: never a webhook target"),
        ("https://100.64.0.1:8443/x", "carrier-grade NAT"),
        ("http://127.0.0.1:8765/", "loopback"),
    ],
)
def test_a_url_whose_host_is_a_refused_address_is_refused_naming_it(url, said):
    with pytest.raises(WebhookTargetRefused) as refused:
        checked_webhook_url(url)
    assert said in str(refused.value)


def test_a_loopback_receiver_is_accepted_once_loopback_is_admitted():
    loopback = parse_networks(LOOPBACK_NETWORKS)
    for url in ("http://127.0.0.1:8080/", "http://[::1]:8080/", "http://localhost/x"):
        assert checked_webhook_url(url, allowed=loopback) == url


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/x",
        "http://example.com/hook",
        "http://10.0.0.1/",
        "gopher://127.0.0.1/",
        "https:///x",
        "https://example.com:nope/",
        "",
    ],
)
def test_only_https_or_http_to_a_loopback_name_has_the_form_of_a_webhook_url(url):
    with pytest.raises(ValueError, match="webhook URL"):
        checked_webhook_url(url, allowed=parse_networks("0.0.0.0/0"))


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("https://169.254.169.254/latest/meta-data/", "instance metadata service"),
        ("https://10.0.0.1/", "a private network (RFC 1918; 10.0.0.0/8)"),
    ],
)
def test_the_settings_refuse_a_webhook_url_whose_host_is_a_refused_address(url, said):
    with pytest.raises(WebhookTargetRefused, match="not a webhook target|never a webhook target") as refused:
        Settings.from_env({"WEBHOOK_URL": url})
    assert said in str(refused.value)
    with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
        Settings(webhook_url=url)


def test_the_settings_admit_what_webhook_allow_networks_admits_but_no_metadata_endpoint():
    admitted = Settings.from_env({"WEBHOOK_URL": "https://10.1.2.3/hook", "WEBHOOK_ALLOW_NETWORKS": "10.0.0.0/8"})
    assert [str(n) for n in admitted.webhook_networks] == ["10.0.0.0/8"]
    with pytest.raises(WebhookTargetRefused, match="never a webhook target"):
        Settings.from_env({"WEBHOOK_URL": "https://169.254.169.254/", "WEBHOOK_ALLOW_NETWORKS": "169.254.0.0/16"})
    with pytest.raises(ValueError, match="webhook_allow_networks: not a network"):
        Settings.from_env({"WEBHOOK_ALLOW_NETWORKS": "10.0.0.1/8"})
    assert Settings().webhook_networks == ()  # deployed: nothing admitted by default
    assert Settings(webhook_url="https://hooks.example.com/a").webhook_url == "https://hooks.example.com/a"
