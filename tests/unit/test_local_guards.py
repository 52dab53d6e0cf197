"""What the local servers a browser can reach check of a request (``mediajobs.local.guards``),
as tables: the ``Host`` names served, the ``Origin`` taken as the server's own, a body read
within its bound and never past it; and the cut of a string shown within a bound."""

from __future__ import annotations

import io
from typing import Any

import pytest

from mediajobs.domain.text import ELLIPSIS, shortened
from mediajobs.local.guards import BodyTooLarge, host_served, read_body, same_origin, served_hosts


@pytest.mark.parametrize(
    ("bound", "port", "hosts"),
    [
        ("127.0.0.1", 5001, {"127.0.0.1:5001", "localhost:5001", "[::1]:5001"}),
        ("localhost", 5001, {"127.0.0.1:5001", "localhost:5001", "[::1]:5001"}),
        ("::1", 5001, {"127.0.0.1:5001", "localhost:5001", "[::1]:5001"}),
        ("0.0.0.0", 5001, {"127.0.0.1:5001", "localhost:5001", "[::1]:5001", "0.0.0.0:5001"}),  # noqa: S104
        ("192.168.1.20", 5001, {"127.0.0.1:5001", "localhost:5001", "[::1]:5001", "192.168.1.20:5001"}),
        ("127.0.0.1", 80, {"127.0.0.1:80", "localhost:80", "[::1]:80", "127.0.0.1", "localhost", "[::1]"}),
    ],
)
def test_a_server_answers_the_loopback_names_and_its_own_address_at_its_port(bound, port, hosts):
    assert served_hosts(bound, port) == hosts


@pytest.mark.parametrize(
    ("host", "served"),
    [
        ("127.0.0.1:5001", True),
        ("LOCALHOST:5001", True),  # a name's case is no part of it
        ("evil.example:5001", False),  # rebound to 127.0.0.1: the attacker's name
        ("evil.example", False),
        ("127.0.0.1:5002", False),  # another port
        ("127.0.0.1.evil.example:5001", False),
        ("", False),
        (None, False),  # no Host at all
    ],
)
def test_only_a_served_host_is_answered(host, served):
    environ = {} if host is None else {"HTTP_HOST": host}
    assert host_served(environ, served_hosts("127.0.0.1", 5001)) is served


@pytest.mark.parametrize(
    ("origin", "same"),
    [
        (None, True),  # not a browser's cross-origin request: a browser sends Origin with every POST
        ("http://127.0.0.1:5001", True),
        ("http://evil.example", False),
        ("null", False),  # an opaque origin: a sandboxed frame, a data: URL
        ("http://localhost:5001", False),  # another origin than the one the request reached
        ("https://127.0.0.1:5001", False),
        ("http://127.0.0.1:5002", False),
    ],
)
def test_only_the_servers_own_origin_is_the_same_origin(origin, same):
    environ = {"HTTP_HOST": "127.0.0.1:5001", **({} if origin is None else {"HTTP_ORIGIN": origin})}
    assert same_origin(environ) is same


class Unread(io.RawIOBase):
    """A request body that must not be read."""

    def read(self, size: int = -1) -> bytes:
        raise AssertionError("the body was read")


def environ_of(stream: Any, length: int | None = None, chunked: bool = False) -> dict[str, Any]:
    environ: dict[str, Any] = {"wsgi.input": stream}
    if length is not None:
        environ["CONTENT_LENGTH"] = str(length)
    if chunked:
        environ["wsgi.input_terminated"] = True
    return environ


def test_a_declared_length_over_the_bound_is_refused_without_reading_the_body():
    with pytest.raises(BodyTooLarge) as refused:
        read_body(environ_of(Unread(), length=8 * 2**20), 6 * 2**20)
    assert refused.value.limit_bytes == 6 * 2**20


def test_a_body_within_the_bound_is_read_to_its_declared_length():
    assert read_body(environ_of(io.BytesIO(b"{}" + b"next request"), length=2), 10) == b"{}"
    assert read_body(environ_of(io.BytesIO(b"x" * 10), length=10), 10) == b"x" * 10


class Counted(io.RawIOBase):
    """An endless body (chunked, no length) that counts what was read of it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        size = 4096 if size < 0 else min(size, 4096)  # a chunk at a time, as a dechunker reads
        self.read_bytes += size
        return b"x" * size


def test_a_chunked_body_is_read_up_to_the_bound_and_one_byte_only():
    endless = Counted()
    with pytest.raises(BodyTooLarge):
        read_body(environ_of(endless, chunked=True), 100_000)
    assert endless.read_bytes == 100_001
    assert read_body(environ_of(io.BytesIO(b"x" * 100_000), chunked=True), 100_000) == b"x" * 100_000


def test_a_body_with_neither_length_nor_chunks_is_empty():
    assert read_body(environ_of(Unread()), 10) == b""


@pytest.mark.parametrize(
    ("text", "max_chars", "shown"),
    [
        ("short", 10, "short"),
        ("exactly 10", 10, "exactly 10"),
        ("eleven char", 10, "eleven ch" + ELLIPSIS),
        ("\U0001f600" * 300, 200, "\U0001f600" * 199 + ELLIPSIS),  # characters, not bytes
        ("ab", 1, ELLIPSIS),
    ],
)
def test_a_string_is_cut_to_its_bound_ending_with_an_ellipsis(text, max_chars, shown):
    assert shortened(text, max_chars) == shown
    assert len(shortened(text, max_chars)) <= max_chars


def test_a_bound_of_no_character_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        shortened("a", 0)
