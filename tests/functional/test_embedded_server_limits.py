"""The embedded server beside other users of the machine: connections that send nothing
cannot take its file descriptors and threads without bound."""

from __future__ import annotations

import socket
import urllib.parse

from mediajobs.local import server
from mediajobs.local.embedded import EmbeddedAws
from tests.conftest import ANSWER_WITHIN_S


def test_connections_beyond_the_bound_are_closed_unanswered_and_the_held_ones_still_answer(monkeypatch):
    """With the bound at 3: three connections that send nothing hold the server's three
    threads; a fourth is closed at once (read gives b""), and once one of the three goes,
    a new connection is answered again."""
    monkeypatch.setattr(server, "MAX_CONNECTIONS", 3)
    with EmbeddedAws(name="limits") as stack:
        where = urllib.parse.urlsplit(stack.endpoint_url)
        address = (where.hostname, where.port)
        held = [socket.create_connection(address, timeout=ANSWER_WITHIN_S) for _ in range(3)]
        try:
            request = f"GET / HTTP/1.1\r\nHost: {where.netloc}\r\n\r\n".encode()
            with socket.create_connection(address, timeout=ANSWER_WITHIN_S) as extra:
                extra.sendall(request)
                assert extra.recv(100) == b""  # closed unanswered
            held.pop().close()
            # the freed thread reads its closed connection and is idle again: a new one is answered
            for _ in range(50):
                with socket.create_connection(address, timeout=ANSWER_WITHIN_S) as again:
                    again.sendall(request)
                    answer = again.recv(100)
                if answer:
                    break
            assert answer.startswith(b"HTTP/1.1 403")  # answered (unsigned: refused)
        finally:
            for connection in held:
                connection.close()
