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
again. Derivatives are shown through ``GET /api/file?key=derivatives/...``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from typing import Any, Final

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from mediajobs.domain.assets import status_document
from mediajobs.domain.errors import PermanentFailure, TransientFailure
from mediajobs.domain.uploads import SUGGESTED_PART_BYTES, UploadRefused
from mediajobs.local.gallery import placeholder_from_manifest
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
#: The most uploads the page lists (the latest): a page, not a database.
MAX_LISTED: Final = 200
#: The prefix the page's uploads go under (``originals/page/...``).
PAGE_PREFIX: Final = "page"


def _page_file(name: str) -> bytes:
    return resources.files("mediajobs.local").joinpath("page", name).read_bytes()


class AppPage:
    """The page's server (module docstring).

    Parameters
    ----------
    uploads: signs the page's uploads (the stack's bucket, its limits).
    assets: reads the uploads' asset records.
    s3: the stack's S3 client (the derivatives the page shows).
    bucket: the stack's bucket.
    multipart_above_bytes: above it the page uploads in parts (the route's threshold).
    host, port: where to listen (port 0: any free one; :attr:`url` says which).
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
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = make_server(host, port, self._wsgi, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="app-page", daemon=True)
        self.url = f"http://{host}:{self._server.server_port}/"

    @property
    def origin(self) -> str:
        """The page's origin (what the bucket's CORS rule admits)."""
        return self.url.rstrip("/")

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
        request = Request(environ)
        response = self._answer(request)
        return response(environ, start_response)

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
            return self._ask(request)
        if method == "POST" and path == "/api/uploads/complete":
            return self._complete(request)
        if method == "GET" and path == "/api/uploads":
            return _json(200, {"uploads": [self.view(made) for made in self.made()]})
        if method == "GET" and path == "/api/events":
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

    def _ask(self, request: Request) -> Response:
        body = _body(request)
        if isinstance(body, dict):
            body = {**body, "prefix": PAGE_PREFIX}
        try:
            answer = self._uploads.ask(body)
        except UploadRefused as refused:
            with self._lock:  # listed too: a reload still says why it was refused
                key = f"refused:{len(self._made)}"
                self._made.append(
                    {
                        "key": key,
                        "name": str(body.get("name")) if isinstance(body, dict) else "?",
                        "sha256": None,
                        "refused": {"reason": refused.reason, "message": refused.detail},
                        "at_s": int(self._clock()),
                    }
                )
            return _json(400, {"reason": refused.reason, "message": refused.detail, "key": key, **refused.extra})
        except TransientFailure as failure:
            return _json(503, {"reason": "unavailable", "message": str(failure)})
        made = {
            "key": answer["key"],
            "name": str(body.get("name")),
            "size_bytes": answer["size_bytes"],
            "sha256": answer["sha256"],
            "path": answer["path"],
            "at_s": int(self._clock()),
        }
        with self._lock:
            self._made.append(made)
            del self._made[:-MAX_LISTED]
        return _json(200, answer)

    def _complete(self, request: Request) -> Response:
        try:
            return _json(200, self._uploads.complete(_body(request)))
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
        return Response(got["Body"].read(), content_type=got.get("ContentType", "application/octet-stream"))

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
        sent: dict[str, str] = {}
        quiet_since = time.monotonic()
        yield b"retry: 1000\n\n"
        while not self._stopping.is_set():
            for made in self.made():
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


def _body(request: Request) -> Any:
    try:
        return json.loads(request.get_data() or b"")
    except (ValueError, RecursionError):  # not JSON, or nested past Python's limit
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
    admit the page's origin for the signed PUT (what the template's ``AppOrigins`` does
    deployed). Not started: use it as a context manager."""
    from mediajobs.bootstrap import build_uploads

    settings = stack.settings(media_bucket=stack.bucket)
    page = AppPage(
        uploads=build_uploads(settings, stack.clients()),
        assets=stack.assets(),
        s3=stack.client("s3"),
        bucket=stack.bucket,
        multipart_above_bytes=settings.multipart_above_bytes,
        host=host,
        port=port,
        wake=subscribe(stack, f"mediajobs-app-page-{uuid.uuid4().hex[:8]}") if stack.notification_bus_name else None,
    )
    rule = {
        "AllowedMethods": ["PUT"],
        "AllowedOrigins": [page.origin],
        "AllowedHeaders": ["content-type", "x-amz-checksum-sha256"],
        "ExposeHeaders": ["ETag", "x-amz-checksum-sha256"],
        "MaxAgeSeconds": 3600,
    }
    stack.client("s3").put_bucket_cors(Bucket=stack.bucket, CORSConfiguration={"CORSRules": [rule]})
    return page
