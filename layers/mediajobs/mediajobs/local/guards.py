"""What the local HTTP servers that a browser can reach -- the app page
(:mod:`mediajobs.local.page`) and the local function URL (:mod:`mediajobs.local.function_url`)
-- check of a request before they answer it.

Any web page the user visits can send requests to ``127.0.0.1``. Two ways in are closed here:

- **DNS rebinding.** A page of ``evil.example`` whose name the attacker then points at
  ``127.0.0.1`` sends its requests to the local server as same-origin requests, with
  ``Host: evil.example:<port>``: a server that answers only the names it is served at
  (:func:`served_hosts`, :func:`host_served`) answers none of them. (A browser always sends
  the name it connected to in ``Host``: RFC 9110, section 7.2.)
- **Cross-site requests.** A page of another origin can send a "simple" POST (a form's, or a
  ``fetch`` with ``Content-Type: text/plain``) without a CORS preflight; the browser then
  names that page's origin in ``Origin`` (Fetch Standard, "Origin header"), ``null`` for an
  opaque one. :func:`same_origin` says whether a request came from the server's own origin.

A body is read within a bound, before anything else is done with it (:func:`read_body`).
"""

from __future__ import annotations

import ipaddress
from typing import IO, Any, Final

from werkzeug.wsgi import get_content_length

#: The names of this machine's loopback interface a browser may reach a local server by.
LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
#: The methods that change nothing (RFC 9110, section 9.2.1): the others are checked for
#: their origin.
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})


class BodyTooLarge(ValueError):
    """A request's body is over ``limit_bytes`` bytes (:func:`read_body`)."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"the body is over {limit_bytes:,} bytes")
        self.limit_bytes = limit_bytes


def served_hosts(bound_host: str, port: int) -> frozenset[str]:
    """The ``Host`` values (lower case) a server bound to ``bound_host`` and ``port``
    answers: ``127.0.0.1:<port>``, ``localhost:<port>``, ``[::1]:<port>`` and the address it
    is bound to (``0.0.0.0:<port>`` too: what it prints; an IPv6 one in brackets, a name as
    given); each also without ``:<port>`` when the port is 80, HTTP's default (as a
    browser then sends it). Pure.

    None of them is a name an attacker can point at this machine: a server bound to every
    interface still answers no other name (none can be told from a rebound one).
    """
    names = set(LOOPBACK_NAMES)
    if bound_host:
        try:
            address = ipaddress.ip_address(bound_host.strip("[]"))
        except ValueError:  # a name: the one it was bound by
            names.add(bound_host.lower())
        else:
            names.add(f"[{address}]" if address.version == 6 else str(address))
    hosts = {f"{name}:{port}" for name in names}
    if port == 80:
        hosts |= names
    return frozenset(hosts)


def host_served(environ: dict[str, Any], hosts: frozenset[str]) -> bool:
    """Whether the request's ``Host`` header is one of ``hosts`` (:func:`served_hosts`);
    a request without one is not (HTTP/1.1 requires it: RFC 9112, section 3.2)."""
    return str(environ.get("HTTP_HOST", "")).lower() in hosts


def same_origin(environ: dict[str, Any]) -> bool:
    """Whether the request's ``Origin`` is absent (not sent by a browser from another
    origin: a browser sends it with every request that is not a ``GET`` or ``HEAD``) or
    is ``http://<its Host>``, the server's own origin as the browser reached it. ``null``
    (an opaque origin: a sandboxed frame, a ``data:`` URL) is not."""
    origin = environ.get("HTTP_ORIGIN")
    return origin is None or str(origin).lower() == f"http://{str(environ.get('HTTP_HOST', '')).lower()}"


def read_body(environ: dict[str, Any], max_bytes: int) -> bytes:
    """The request's body, at most ``max_bytes`` bytes, read no further than needed to know:
    a ``Content-Length`` over ``max_bytes`` is refused before any byte of the body is read;
    a chunked body (no length: ``wsgi.input_terminated``) is read up to ``max_bytes + 1``
    bytes. A body with neither is empty (as werkzeug reads it).

    Raises
    ------
    BodyTooLarge
        If the body is over ``max_bytes`` bytes.
    """
    stream: IO[bytes] = environ["wsgi.input"]
    length = get_content_length(environ)
    if length is not None:
        if length > max_bytes:
            raise BodyTooLarge(max_bytes)
        return _read_up_to(stream, length)
    if not environ.get("wsgi.input_terminated"):
        return b""
    body = _read_up_to(stream, max_bytes + 1)
    if len(body) > max_bytes:
        raise BodyTooLarge(max_bytes)
    return body


def _read_up_to(stream: IO[bytes], size_bytes: int) -> bytes:
    """Up to ``size_bytes`` bytes of ``stream``: fewer only at its end (a dechunking stream
    answers a chunk at a time)."""
    chunks, left = [], size_bytes
    while left > 0 and (chunk := stream.read(min(left, 2**20))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
