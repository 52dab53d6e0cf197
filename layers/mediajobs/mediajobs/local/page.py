"""The app page ``mediajobs serve --worker`` serves at ``/`` (:class:`AppPage`): what an app's
upload UI does, end to end, against the embedded stack.

A person drops or picks files. For each, the page (``local/page/app.js``, no framework):

1. hashes it -- Web Crypto for a file that fits in memory, the vendored js-sha256 (MIT,
   ``local/page/vendor/``) a chunk at a time beyond -- with its progress;
2. asks for its upload (``POST /api/uploads``: this server signs it with the same
   :class:`~mediajobs.service_layer.uploads.Uploads` as the status function's
   ``POST /uploads``) and PUTs the bytes to the embedded S3 through the presigned URL, with
   its progress (the bucket's CORS rule admits the page's origin, as ``AppOrigins`` does
   deployed);
3. shows the asset's state as it changes, live from server-sent events (``GET /api/events``,
   fed by the stack's notifications -- a queue of the page's own on the notification bus,
   as an app subscribes to it: an asset's end wakes the stream at once -- and by the
   status documents of the page's uploads, read at least every second for the worker's
   progress; the page polls nothing): ``pending``, ``processing``
   with its fraction, the ThumbHash placeholder as soon as it is there, then ``ready`` with
   the ``card`` image and a link to every output -- or ``failed`` with the reason in
   words, ``rejected``, ``review``.

The uploads made from the page are kept here (``GET /api/uploads``): a reload lists them
again, the latest :data:`MAX_LISTED` (refused asks too), each name cut to
:data:`MAX_SHOWN_NAME_CHARS` characters and each refusal's words to
:data:`MAX_SHOWN_MESSAGE_CHARS`. Derivatives are shown through
``GET /api/file?key=derivatives/...``: inline only when their type is one a recipe writes
(:data:`~mediajobs.domain.manifest.DERIVATIVE_CONTENT_TYPES`), as an attachment in a sandbox
otherwise.

A web page the user visits can reach ``127.0.0.1`` too, so every request is checked first
(:mod:`mediajobs.local.guards`): its ``Host`` must be a name the page is served at (421
otherwise: DNS rebinding), a request other than ``GET``/``HEAD`` must come from the page's
own origin (403), the JSON routes take ``Content-Type: application/json`` only (415: a
cross-site "simple" request cannot reach them) and a body of at most
:data:`MAX_JSON_BODY_BYTES` (413, refused before it is read). Every answer carries
``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``,
``Cross-Origin-Resource-Policy: same-origin`` and a Content Security Policy
(:func:`page_policy`: the page's own script only, no inline script or style, requests to
itself and the embedded S3 only, no framing).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from typing import Any, Final

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from mediajobs.domain.assets import status_document
from mediajobs.domain.errors import PermanentFailure, TransientFailure
from mediajobs.domain.manifest import DERIVATIVE_CONTENT_TYPES
from mediajobs.domain.text import shortened
from mediajobs.domain.uploads import MAX_PARTS, SUGGESTED_PART_BYTES, UploadRefused
from mediajobs.local.gallery import placeholder_from_manifest
from mediajobs.local.guards import SAFE_METHODS, BodyTooLarge, host_served, read_body, same_origin, served_hosts
from mediajobs.service_layer.ports import Assets
from mediajobs.service_layer.uploads import Uploads

log = logging.getLogger(__name__)

#: The page's files, served as they are (path -> (package file, content type)).
FILES: Final = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/vendor/sha256.min.js": ("vendor/js-sha256-1.0.0.min.js", "text/javascript; charset=utf-8"),
    "/vendor/LICENSE-js-sha256.txt": ("vendor/LICENSE-js-sha256.txt", "text/plain; charset=utf-8"),
}
#: Files up to this size are hashed in one Web Crypto call (the whole file in memory);
#: larger ones a chunk at a time with js-sha256.
HASH_IN_MEMORY_BELOW_BYTES: Final = 256 * 2**20
#: How often the events stream reads the page's uploads' status documents, seconds.
EVENTS_EVERY_S: Final = 0.25
#: The most uploads the page keeps and lists (the latest, refused asks included): a page,
#: not a database.
MAX_LISTED: Final = 200
#: The most event streams open at once (a page holds one; a few tabs of it more): each reads
#: every listed upload's status about every second, so streams without a bound are CPU
#: anyone on the machine could take. One more is answered 429.
MAX_EVENT_STREAMS: Final = 8
#: The longest name a listed upload shows, characters (a longer one is cut, ending with
#: ``…``): the name is the caller's, of any length.
MAX_SHOWN_NAME_CHARS: Final = 200
#: The longest words a listed refusal shows, characters (cut as names are).
MAX_SHOWN_MESSAGE_CHARS: Final = 400
#: The largest body the JSON routes (``POST /api/uploads``, ``POST /api/uploads/complete``)
#: take, bytes: the largest the page sends is a completion of :data:`MAX_PARTS` parts, each
#: under 128 bytes as JSON (``{"part_number":10000,"etag":"\"<32 hex>\"","sha256":"<44>"}``),
#: with room for the rest. A larger one is refused (413) before it is read.
MAX_JSON_BODY_BYTES: Final = MAX_PARTS * 128 + 64 * 2**10
#: The prefix the page's uploads go under (``originals/page/...``).
PAGE_PREFIX: Final = "page"


def _page_file(name: str) -> bytes:
    return resources.files("mediajobs.local").joinpath("page", name).read_bytes()


def page_policy(upload_origin: str) -> str:
    """The page's Content Security Policy (CSP Level 3), on every answer of its server:
    nothing by default; its own scripts and style sheets only (no inline script, style or
    handler: ``index.html`` has none); images from itself and ``data:`` URLs (the ThumbHash
    placeholder); media from itself (an output opened in a tab); requests to itself and to
    ``upload_origin`` only (the embedded S3, ``http://127.0.0.1:<port>``, which the page
    PUTs the bytes to); no ``<base>``, no form submission, and no page may frame it.
    Pure."""
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            "media-src 'self'",
            f"connect-src 'self' {upload_origin}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


#: The policy of an answer that is not shown inline (an attachment): a sandbox (no script,
#: an opaque origin), and nothing it may load.
ATTACHMENT_POLICY: Final = "sandbox; default-src 'none'"


class _Refused(Exception):
    """A request refused before its route: its status and words."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class AppPage:
    """The page's server (module docstring).

    Parameters
    ----------
    uploads: signs the page's uploads (the stack's bucket, its limits).
    assets: reads the uploads' asset records.
    s3: the stack's S3 client (the derivatives the page shows).
    bucket: the stack's bucket.
    multipart_above_bytes: above it the page uploads in parts (the route's threshold).
    upload_origin: the origin the page PUTs uploads to (the embedded S3's,
        ``http://127.0.0.1:<port>``): the one other origin its policy lets it connect to.
    host, port: where to listen (port 0: any free one; :attr:`url` says which); a request
        must name it in ``Host`` as :func:`~mediajobs.local.guards.served_hosts` says.
    clock: Unix time, seconds.
    wake: waits up to the seconds given for one of the stack's notifications (the page's
        subscription: :func:`subscribe`); whether one came. ``None``: the stream reads
        the status documents every :data:`EVENTS_EVERY_S` only.
    """

    def __init__(
        self,
        *,
        uploads: Uploads,
        assets: Assets,
        s3: Any,
        bucket: str,
        multipart_above_bytes: int,
        upload_origin: str,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
        wake: Callable[[float], bool] | None = None,
    ) -> None:
        self._uploads = uploads
        self._wake = wake
        #: How many of the stack's notifications woke the events streams.
        self.notified = 0
        self._assets = assets
        self._s3 = s3
        self._bucket = bucket
        self._multipart_above = multipart_above_bytes
        self._clock = clock
        self._made: list[dict[str, Any]] = []
        self._streams = 0  # event streams open
        self._refusals = itertools.count(1)  # names each refused ask kept
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._policy = page_policy(upload_origin)
        self._server = make_server(host, port, self._wsgi, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="app-page", daemon=True)
        self.url = f"http://{host}:{self._server.server_port}/"
        self._hosts = served_hosts(host, self._server.server_port)

    @property
    def origin(self) -> str:
        """The page's origin as :attr:`url` names it."""
        return self.url.rstrip("/")

    @property
    def origins(self) -> list[str]:
        """Every origin the page is served at (``http://`` and each served ``Host``,
        sorted): what the bucket's CORS rule admits."""
        return sorted(f"http://{host}" for host in self._hosts)

    def __enter__(self) -> AppPage:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._thread.join()
        self._server.server_close()

    # -- requests ----------------------------------------------------------------------------

    def _wsgi(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            response = self._answer(self._checked(environ))
        except _Refused as refused:
            response = _json(refused.status, {"message": refused.message})
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cross-Origin-Resource-Policy"] = "same-origin"
        response.headers.setdefault("Content-Security-Policy", self._policy)
        return response(environ, start_response)

    def _checked(self, environ: dict[str, Any]) -> Request:
        """The request, once its ``Host`` and (unless it is a ``GET`` or ``HEAD``) its
        ``Origin`` are the page's own (module docstring).

        Raises
        ------
        _Refused
            421 for another ``Host``, 403 for another ``Origin``.
        """
        if not host_served(environ, self._hosts):
            raise _Refused(421, f"this page is served at {sorted(self._hosts)} only")
        if environ.get("REQUEST_METHOD") not in SAFE_METHODS and not same_origin(environ):
            raise _Refused(403, "only the page itself may send this request (its Origin is another)")
        return Request(environ)

    def _answer(self, request: Request) -> Response:
        path, method = request.path, request.method
        if method == "GET" and path in FILES:
            name, content_type = FILES[path]
            return Response(_page_file(name), content_type=content_type, headers={"Cache-Control": "no-store"})
        if method == "GET" and path == "/favicon.ico":
            return Response(status=204)
        if method == "GET" and path == "/api/config":
            return _json(200, self.config())
        if method == "POST" and path == "/api/uploads":
            return self._ask(_json_body(request))
        if method == "POST" and path == "/api/uploads/complete":
            return self._complete(_json_body(request))
        if method == "GET" and path == "/api/uploads":
            return _json(200, {"uploads": [self.view(made) for made in self.made()]})
        if method == "GET" and path == "/api/events":
            with self._lock:
                if self._streams >= MAX_EVENT_STREAMS:
                    return _json(429, {"message": f"at most {MAX_EVENT_STREAMS} event streams at once"})
                self._streams += 1
            return Response(self._events(), content_type="text/event-stream", headers={"Cache-Control": "no-store"})
        if method == "GET" and path == "/api/file":
            return self._file(request.args.get("key", ""))
        return _json(404, {"message": f"no {method} {path} here"})

    def config(self) -> dict[str, Any]:
        """What the page needs to know before it hashes: the thresholds."""
        return {
            "multipart_above_bytes": self._multipart_above,
            "part_size_bytes": SUGGESTED_PART_BYTES,
            "hash_in_memory_below_bytes": HASH_IN_MEMORY_BELOW_BYTES,
            "prefix": PAGE_PREFIX,
        }

    def made(self) -> list[dict[str, Any]]:
        """The uploads made from the page, oldest first."""
        with self._lock:
            return list(self._made)

    def _keep(self, made: dict[str, Any]) -> None:
        """Keep ``made`` (an upload or a refused ask) for the listing: the latest
        :data:`MAX_LISTED` are kept, its name cut to :data:`MAX_SHOWN_NAME_CHARS`."""
        made = {**made, "name": shortened(made["name"], MAX_SHOWN_NAME_CHARS)}
        with self._lock:
            self._made.append(made)
            del self._made[:-MAX_LISTED]

    def _ask(self, body: Any) -> Response:
        if isinstance(body, dict):
            body = {**body, "prefix": PAGE_PREFIX}
        name = str(body.get("name")) if isinstance(body, dict) else "?"
        try:
            answer = self._uploads.ask(body)
        except UploadRefused as refused:
            key = f"refused:{next(self._refusals)}"
            message = shortened(refused.detail, MAX_SHOWN_MESSAGE_CHARS)
            refusal = {"reason": refused.reason, "message": message}
            # listed too: a reload still says why it was refused
            self._keep({"key": key, "name": name, "sha256": None, "refused": refusal, "at_s": int(self._clock())})
            return _json(400, {**refusal, "key": key, **refused.extra})
        except TransientFailure as failure:
            return _json(503, {"reason": "unavailable", "message": str(failure)})
        self._keep(
            {
                "key": answer["key"],
                "name": name,
                "size_bytes": answer["size_bytes"],
                "sha256": answer["sha256"],
                "path": answer["path"],
                "at_s": int(self._clock()),
            }
        )
        return _json(200, answer)

    def _complete(self, body: Any) -> Response:
        key = body.get("key") if isinstance(body, dict) else None
        with self._lock:
            asked = any(made.get("key") == key and not made.get("refused") for made in self._made)
        if not asked:  # the page completes its own uploads only (another's upload id is no key to it)
            return _json(400, {"reason": "invalid_request", "message": "not an upload this page asked for"})
        try:
            return _json(200, self._uploads.complete(body))
        except UploadRefused as refused:
            return _json(400, {"reason": refused.reason, "message": refused.detail})
        except PermanentFailure as refused:
            return _json(400, {"reason": refused.reason, "message": refused.detail})
        except TransientFailure as failed:
            return _json(503, {"reason": "unavailable", "message": str(failed)})

    def _file(self, key: str) -> Response:
        if not key.startswith("derivatives/") or ".." in key:
            return _json(404, {"message": "only derivatives are shown here"})
        try:
            got = self._s3.get_object(Bucket=self._bucket, Key=key)
        except Exception:  # noqa: BLE001 - gone (collected) or never there: not found
            return _json(404, {"message": f"no {key}"})
        stored = str(got.get("ContentType") or "").split(";")[0].strip().lower()
        if stored in DERIVATIVE_CONTENT_TYPES:  # what a recipe writes: shown as it is
            return Response(got["Body"].read(), content_type=stored, headers={"Cache-Control": "no-store"})
        # Anything else (text/html, image/svg+xml ...: it could run script on this origin)
        # is not shown: a download, in a sandbox, of no type a browser renders.
        return Response(
            got["Body"].read(),
            content_type="application/octet-stream",
            headers={
                "Content-Disposition": "attachment",
                "Content-Security-Policy": ATTACHMENT_POLICY,
                "Cache-Control": "no-store",
            },
        )

    # -- what the page shows -----------------------------------------------------------------

    def view(self, made: dict[str, Any]) -> dict[str, Any]:
        """One upload as the page shows it: the upload, and its asset's state now (``None``
        before its event arrived), its progress (0-1, the processing jobs' least), the
        placeholder (a ``data:`` URL), the ``card`` (URL and size) and every output."""
        shown: dict[str, Any] = {**made, "state": None, "reason": None, "detail": "", "progress": None}
        if made.get("refused"):
            return shown
        asset = self._assets.get(self._bucket, made["key"])
        if asset is None:
            return shown
        document = status_document(asset)
        recipes = document["recipes"].values()
        working = [r["progress"] for r in recipes if r["state"] == "processing" and r["progress"] is not None]
        done = [r for r in recipes if r["state"] == "done"]
        placeholder = (
            placeholder_from_manifest({"decisions": document["placeholder"]}) if document["placeholder"] else None
        )
        outputs = [
            {**o, "name": o["key"].rsplit("/", 1)[-1], "url": f"/api/file?key={o['key']}"}
            for r in recipes
            for o in r["outputs"]
        ]
        card = next((o for o in outputs if o["name"].startswith("card.")), None)
        poster = next((o for o in outputs if o["name"].startswith("poster.")), None)
        fraction = (
            min(working)
            if working
            else (len(done) / len(recipes) if document["state"] == "processing" and recipes else None)
        )
        return {
            **shown,
            "state": document["state"],
            "reason": document["reason"],
            "detail": document["detail"],
            "progress": fraction,
            "media": document["media"],
            "placeholder_url": placeholder.data_url if placeholder is not None else None,
            "card": card or poster,
            "outputs": outputs,
        }

    def _events(self) -> Iterator[bytes]:
        """Server-sent events: each upload's view when it changes (``data: <JSON>``), and a
        comment every few seconds so that a proxy keeps the stream open."""
        try:
            yield from self._stream()
        finally:  # the client went away (or the page stops): its slot is free
            with self._lock:
                self._streams -= 1

    def _stream(self) -> Iterator[bytes]:
        sent: dict[str, str] = {}
        quiet_since = time.monotonic()
        yield b"retry: 1000\n\n"
        while not self._stopping.is_set():
            listed = self.made()
            kept = {made["key"] for made in listed}
            sent = {key: shown for key, shown in sent.items() if key in kept}  # as bounded as the listing
            for made in listed:
                try:
                    shown = json.dumps(self.view(made), sort_keys=True)
                except Exception as exc:  # noqa: BLE001 - the table is busy: next time
                    log.debug("could not read %s: %s", made["key"], exc)
                    continue
                if sent.get(made["key"]) != shown:
                    sent[made["key"]] = shown
                    quiet_since = time.monotonic()
                    yield f"data: {shown}\n\n".encode()
            if time.monotonic() - quiet_since > 10:
                quiet_since = time.monotonic()
                yield b": still here\n\n"
            if self._wake is None:
                time.sleep(EVENTS_EVERY_S)  # the stream's own pace (the page waits on it, not on a timer)
            elif self._wake(1.0):  # a notification: read the documents again at once
                self.notified += 1


def _json_body(request: Request) -> Any:
    """The request's JSON body (``None`` when it is not JSON, or nested past Python's
    limit: the route refuses it).

    Raises
    ------
    _Refused
        415 for another ``Content-Type`` than ``application/json``, 413 for a body over
        :data:`MAX_JSON_BODY_BYTES` (not read).
    """
    if request.mimetype != "application/json":
        raise _Refused(415, "the body is JSON: Content-Type: application/json")
    try:
        data = read_body(request.environ, MAX_JSON_BODY_BYTES)
    except BodyTooLarge as refused:
        raise _Refused(413, f"the body is at most {refused.limit_bytes:,} bytes") from refused
    try:
        return json.loads(data or b"")
    except (ValueError, RecursionError):
        return None


def _json(status: int, body: Any) -> Response:
    return Response(
        json.dumps(body), status=status, content_type="application/json", headers={"Cache-Control": "no-store"}
    )


def subscribe(stack: Any, name: str) -> Callable[[float], bool]:
    """Subscribe a queue ``name`` of the embedded ``stack`` to its notification bus (an
    EventBridge rule on source ``mediajobs``, as an app's own rule would); a function that
    waits up to the seconds given (SQS long polling, whole seconds, at least one) for a
    notification, consumes what came, and says whether anything did."""
    sqs, events = stack.client("sqs"), stack.client("events")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    bus = stack.notification_bus_name
    events.put_rule(Name=name, EventBusName=bus, EventPattern=json.dumps({"source": ["mediajobs"]}))
    events.put_targets(Rule=name, EventBusName=bus, Targets=[{"Id": "app-page", "Arn": arn}])

    def wake(timeout_s: float) -> bool:
        wait = max(1, min(20, int(timeout_s)))
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=wait, MaxNumberOfMessages=10).get("Messages", [])
        for message in got:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return bool(got)

    return wake


def page_for(stack: Any, *, host: str = "127.0.0.1", port: int = 0) -> AppPage:
    """The app page of the embedded ``stack`` (a :class:`~mediajobs.local.stack.LocalStack`),
    its uploads signed as the status function signs them, and the bucket's CORS rule set to
    admit the page's origins for the signed PUT (what the template's ``AppOrigins`` does
    deployed). Not started: use it as a context manager."""
    from mediajobs.bootstrap import build_uploads

    settings = stack.settings(media_bucket=stack.bucket)
    endpoint = urllib.parse.urlsplit(stack.endpoint_url)
    page = AppPage(
        uploads=build_uploads(settings, stack.clients()),
        assets=stack.assets(),
        s3=stack.client("s3"),
        bucket=stack.bucket,
        multipart_above_bytes=settings.multipart_above_bytes,
        upload_origin=f"{endpoint.scheme}://{endpoint.netloc}",
        host=host,
        port=port,
        wake=subscribe(stack, f"mediajobs-app-page-{uuid.uuid4().hex[:8]}") if stack.notification_bus_name else None,
    )
    rule = {
        "AllowedMethods": ["PUT"],
        "AllowedOrigins": page.origins,
        "AllowedHeaders": ["content-type", "x-amz-checksum-sha256"],
        "ExposeHeaders": ["ETag", "x-amz-checksum-sha256"],
        "MaxAgeSeconds": 3600,
    }
    stack.client("s3").put_bucket_cors(Bucket=stack.bucket, CORSConfiguration={"CORSRules": [rule]})
    return page
