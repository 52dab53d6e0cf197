"""A Lambda function URL with ``AuthType: AWS_IAM``, locally: :class:`FunctionUrl` serves a
function's resolver (the status function's: ``/assets``, ``/uploads``, ``/promos`` ...) over
HTTP, as Lambda does in front of it.

Each request must be signed with SigV4 for the service ``lambda`` by the embedded AWS's
credentials (the signature is computed again and compared by the embedded AWS's own check,
:func:`~mediajobs.local.authentication.refusal_of`, as Lambda's IAM check would: an
unsigned or wrongly signed request, another body than the one signed, a signature more
than 15 minutes from now, is answered 403 without reaching the function). The
request becomes a function URL event (payload format 2.0,
:func:`~mediajobs.local.function_events.function_url_event`) and the resolver's answer the
HTTP response. An app's backend calls it exactly as it calls the deployed ``StatusUrl``
(docs/apps.md's snippet is tested against it).

Before the signature, as Lambda does in front of a function, and because a web page the
user visits can reach ``127.0.0.1`` too (:mod:`mediajobs.local.guards`):

- a ``Host`` other than the names it is served at (``127.0.0.1:<port>``, ``localhost:<port>``,
  ``[::1]:<port>``) is answered 421 (DNS rebinding: a page whose name resolves to
  ``127.0.0.1`` names that name, and must not reach the function through it);
- a body over :data:`MAX_PAYLOAD_BYTES` is answered 413 without being read (from its
  ``Content-Length``; a chunked one is read up to the limit and one byte), and so is a
  request whose event, once built, is over it (a binary body grows by a third in base64).
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from mediajobs.local.authentication import Received, is_preflight, refusal_of
from mediajobs.local.function_events import function_url_event
from mediajobs.local.guards import BodyTooLarge, host_served, read_body, served_hosts

#: What a handler of a function URL event is: ``resolve(event, context)`` of a resolver.
Resolve = Callable[[dict[str, Any], Any], dict[str, Any]]


#: The largest invocation payload Lambda takes, bytes (Lambda quotas: "Invocation payload
#: (request and response): 6 MB each for request and response", synchronous; Invoke
#: refuses a larger one with "Request must be smaller than 6291456 bytes for the
#: InvokeFunction operation", and a function URL answers 413).
MAX_PAYLOAD_BYTES: Final = 6 * 2**20
#: Lambda's words for a payload over :data:`MAX_PAYLOAD_BYTES`.
TOO_LARGE_MESSAGE: Final = f"Request must be smaller than {MAX_PAYLOAD_BYTES} bytes for the InvokeFunction operation"


class FunctionUrl:
    """Serves ``resolve`` at ``http://<host>:<port>/`` behind a SigV4 check (module docstring).

    Parameters
    ----------
    resolve: the function's resolver (``app.resolve``).
    credentials: the credentials a caller must sign with (the embedded AWS's:
        ``aws_access_key_id``, ``aws_secret_access_key``).
    region: the region a signature names.
    host, port: where to listen (port 0: any free one; :attr:`url` says which); a
        request must name it in ``Host`` as :func:`~mediajobs.local.guards.served_hosts`
        says (421 otherwise).
    caller_arn: the principal the event names as the caller.
    """

    def __init__(
        self,
        resolve: Resolve,
        *,
        credentials: Mapping[str, str],
        region: str,
        host: str = "127.0.0.1",
        port: int = 0,
        caller_arn: str | None = None,
    ) -> None:
        self._resolve = resolve
        self._credentials = credentials
        self._region = region
        self._caller_arn = caller_arn
        self._server = make_server(host, port, self._wsgi, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="function-url", daemon=True)
        self.url = f"http://{host}:{self._server.server_port}/"
        self._hosts = served_hosts(host, self._server.server_port)

    def _wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return self._answer(environ)(environ, start_response)

    def _answer(self, environ: dict[str, Any]) -> Response:
        if not host_served(environ, self._hosts):
            return _refused(421, f"this function URL is served at {sorted(self._hosts)} only")
        request = Request(environ)
        try:
            body = read_body(environ, MAX_PAYLOAD_BYTES)
        except BodyTooLarge:
            return _refused(413, TOO_LARGE_MESSAGE)
        received = Received.from_environ(environ, io.BytesIO(body))
        # A preflight is no exception here: an AWS_IAM function URL answers only what is signed.
        refused = is_preflight(received) or refusal_of(
            received, self._credentials, time.time(), service="lambda", region=self._region
        )
        if refused:
            return _refused(403, "Forbidden")  # as Lambda answers an unsigned request to an AWS_IAM function URL
        try:
            text = body.decode("utf-8") if body else None
        except UnicodeDecodeError:
            text = None
        event = function_url_event(
            urllib.parse.urlsplit(request.full_path).query,
            method=request.method,
            path=request.path,
            body=text,
            caller_arn=self._caller_arn,
        )
        if body and text is None:  # not text: Lambda passes it base64-encoded
            event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode("ascii"), True
        if len(json.dumps(event).encode("utf-8")) > MAX_PAYLOAD_BYTES:  # the payload is the event
            return _refused(413, TOO_LARGE_MESSAGE)
        answer = self._resolve(event, None)
        return Response(
            answer.get("body") or "",
            status=int(answer.get("statusCode", 200)),
            headers={k: v for k, v in (answer.get("headers") or {}).items()},
        )

    def __enter__(self) -> FunctionUrl:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()


def _refused(status: int, message: str) -> Response:
    """A refusal as a function URL words it: ``{"Message": ...}``."""
    return Response(json.dumps({"Message": message}), status=status, content_type="application/json")
