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
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from mediajobs.local.authentication import Received, read_body, refusal_of
from mediajobs.local.function_events import function_url_event

#: What a handler of a function URL event is: ``resolve(event, context)`` of a resolver.
Resolve = Callable[[dict[str, Any], Any], dict[str, Any]]


class FunctionUrl:
    """Serves ``resolve`` at ``http://<host>:<port>/`` behind a SigV4 check (module docstring).

    Parameters
    ----------
    resolve: the function's resolver (``app.resolve``).
    credentials: the credentials a caller must sign with (the embedded AWS's:
        ``aws_access_key_id``, ``aws_secret_access_key``).
    region: the region a signature names.
    host, port: where to listen (port 0: any free one; :attr:`url` says which).
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

    def _wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        received = Received.from_environ(environ, read_body(environ))
        body = received.body.getvalue()
        request = Request(environ)
        if refusal_of(received, self._credentials, time.time(), service="lambda", region=self._region) is not None:
            refused = Response(
                json.dumps({"Message": "Forbidden"}), status=403, content_type="application/json"
            )  # as Lambda answers an unsigned request to an AWS_IAM function URL
            return refused(environ, start_response)
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
        answer = self._resolve(event, None)
        response = Response(
            answer.get("body") or "",
            status=int(answer.get("statusCode", 200)),
            headers={k: v for k, v in (answer.get("headers") or {}).items()},
        )
        return response(environ, start_response)

    def __enter__(self) -> FunctionUrl:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()
