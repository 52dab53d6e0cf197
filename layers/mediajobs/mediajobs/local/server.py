"""The embedded AWS's server: moto's server on a thread of this process
(:class:`EmbeddedServer`, its requests answered by a pool of threads: :class:`PooledWSGIServer`),
behind :class:`~mediajobs.local.authentication.Authentication` (every request signed with
the server's credentials, as AWS requires) and :class:`AtomicWrites`, on a moto adapted to
behave as AWS where the product depends on it (:data:`ADAPTATIONS`) while the server runs."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer

from mediajobs.local.adaptations import ModuleListCached, MotoAdaptations
from mediajobs.local.authentication import Authentication, read_body
from mediajobs.local.conflicts import DEFAULT_HOLD_S, TransactionConflicts
from mediajobs.local.credentials import new_credentials
from mediajobs.local.moto_dynamodb import QueryByPartition, TransactionsAsDynamoDB
from mediajobs.local.moto_rekognition import DetectModerationLabels
from mediajobs.local.moto_s3 import ChecksumsAsS3, S3EventsAsAws, VersionsListedUnderPrefix
from mediajobs.local.moto_sqs import SqsClock

#: The adaptations of moto every embedded server holds while it runs (reference-counted:
#: applied when the first server of the process starts, undone when the last one stops,
#: moto's state emptied both times).
ADAPTATIONS = MotoAdaptations(
    (
        ModuleListCached,
        TransactionsAsDynamoDB,
        QueryByPartition,
        S3EventsAsAws,
        VersionsListedUnderPrefix,
        ChecksumsAsS3,
        SqsClock,
        DetectModerationLabels,
    )
)


class AtomicWrites:
    """WSGI middleware that makes the moto server's conditional writes atomic, as AWS's are.

    moto (5.x) applies a DynamoDB ``PutItem``/``UpdateItem``/``DeleteItem`` and an S3
    ``PutObject`` with ``If-None-Match`` as "read the item, check the condition, write"
    with no lock, and its server answers requests on many threads. Two writers can then
    both pass a condition that DynamoDB (single-item writes are atomic; see "Condition
    expressions" in the DynamoDB developer guide) or S3 (conditional writes) lets only one
    pass: measured, 3 of 200 rounds of ten threads racing one takeover gave two winners.

    Each request's body is read whole first, outside any lock, so a client that stops
    half-way through its body holds up nobody else. Then moto's own routing picks the
    service, and every DynamoDB request runs alone among DynamoDB requests, every S3
    ``PUT``, ``POST`` or ``DELETE`` (signed or presigned) alone among S3 writes;
    its whole response is built inside the lock. S3 reads and every other service (SQS
    long polls included) are not serialised. The locks are the class's: moto's backends
    are shared by the whole process, whatever server answers.

    Parameters
    ----------
    dispatcher: moto's ``DomainDispatcherApplication``, which routes a request to its
        service's application.
    """

    DYNAMODB = threading.Lock()
    S3_WRITES = threading.Lock()

    def __init__(self, dispatcher: DomainDispatcherApplication) -> None:
        self.dispatcher = dispatcher

    @classmethod
    def lock_for(cls, service: str, method: str) -> threading.Lock | None:
        """The lock a request of moto's ``service`` (``"dynamodb"``, ``"s3"``, ...) with
        HTTP ``method`` must hold, or ``None`` when it runs unserialised."""
        if service.startswith("dynamodb"):
            return cls.DYNAMODB
        if service == "s3" and method in ("PUT", "POST", "DELETE"):
            return cls.S3_WRITES
        return None

    def route(self, environ: dict[str, Any]) -> tuple[Callable[..., Iterable[bytes]], threading.Lock | None]:
        """The application moto routes ``environ`` to, and the lock it must run under."""
        app = self.dispatcher.get_application(environ)
        return app, self.lock_for(str(getattr(app, "service", "")), environ.get("REQUEST_METHOD", ""))

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        read_body(environ)  # once: the authentication in front of it has read it already
        app, lock = self.route(environ)
        if lock is None:
            return app(environ, start_response)
        with lock:
            response = app(environ, start_response)
            try:
                return list(response)
            finally:
                if hasattr(response, "close"):  # PEP 3333: the caller of an iterable closes it
                    response.close()


#: Seconds a connection may keep the server waiting for its next bytes (a request line, a
#: header, a part of its body) before it is closed: a client that sends part of a request
#: and waits would otherwise hold its thread and its socket for ever. A long poll is not
#: waited on so (the server answers it; it reads nothing meanwhile).
READ_TIMEOUT_S: Final = 30
#: The most connections held at once; one more is closed unanswered: idle connections
#: opened by the thousand would take the process's file descriptors (and the machine's
#: two cores, in the accept loop), and every client with them.
MAX_CONNECTIONS: Final = 1024


class TimedRequestHandler(MotoRequestHandler):
    """moto's request handler, its socket reads bounded by :data:`READ_TIMEOUT_S`."""

    timeout = READ_TIMEOUT_S


class PooledWSGIServer(BaseWSGIServer):
    """werkzeug's WSGI server with its connections answered by a pool of daemon threads,
    instead of a new thread per connection: a connection goes to an idle thread, and a
    thread is started only when none is idle, so the pool grows to the most connections
    open at once, as many threads as werkzeug's threaded server would run then. (A bound
    on threads would let that many connections that send nothing, or long polls, hold up
    every other request: a bug found by trying to break it.) What bounds it instead: a
    connection that stops sending is closed after :data:`READ_TIMEOUT_S`, and beyond
    :data:`MAX_CONNECTIONS` held at once a new one is closed unanswered.

    werkzeug (3.x) closes every connection after one response ("Connection: close": its
    server cannot drain a request body before the next request line), so each request is
    a new connection, and its threaded server starts a thread for each one and waits for
    it to run: under the storm's load that start is where requests queued (measured on 4
    client processes against one server: 12 % less wall time, 10 % less server CPU per
    request with the pool).

    Parameters
    ----------
    host, port, app, handler: as :class:`werkzeug.serving.BaseWSGIServer`'s.
    """

    multithread = True  # werkzeug then speaks HTTP/1.1, as its threaded server does

    def __init__(
        self,
        host: str,
        port: int,
        app: Callable[..., Iterable[bytes]],
        *,
        handler: type[MotoRequestHandler],
    ) -> None:
        # Before werkzeug binds: a port in use makes it close the server (server_close) and exit.
        self._connections: queue.SimpleQueue[tuple[socket.socket, Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0
        super().__init__(host, port, app, handler=handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the connection to an idle thread of the pool (a new one when none is idle);
        close it unanswered when :data:`MAX_CONNECTIONS` are held already."""
        with self._lock:
            if self._threads - self._idle >= MAX_CONNECTIONS:
                self.shutdown_request(request)
                return
            if self._idle == 0:
                self._threads += 1
                self._idle += 1
                threading.Thread(target=self._answer, name="moto-request", daemon=True).start()
            self._idle -= 1
        self._connections.put((request, client_address))

    def _answer(self) -> None:
        while (connection := self._connections.get()) is not None:
            request, client_address = connection
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)
                with self._lock:
                    self._idle += 1

    def server_close(self) -> None:
        """Close the socket; the pool's threads end once they have answered what they hold."""
        super().server_close()
        with self._lock:
            threads = self._threads
        for _ in range(threads):
            self._connections.put(None)


class EmbeddedServer:
    """moto's server (its application and request handler) on a thread of this process,
    behind :class:`~mediajobs.local.authentication.Authentication` (a request not signed
    with :attr:`credentials` is refused as AWS refuses it, before anything else sees it),
    then :class:`AtomicWrites`. While it runs (from :meth:`start` to :meth:`stop`), it
    holds :data:`ADAPTATIONS`: moto behaves as the embedded AWS documents, and is itself
    again once the last server of the process has stopped.

    Parameters
    ----------
    host: address to listen on; port: TCP port, 0 for a free one.
    credentials: ``aws_access_key_id`` and ``aws_secret_access_key`` every request must be
        signed with; default new random ones
        (:func:`~mediajobs.local.credentials.new_credentials`).
    transaction_hold_s: when set, DynamoDB's transaction conflicts are emulated in front
        of moto (:class:`~mediajobs.local.conflicts.TransactionConflicts`), each
        transaction holding its items this long, seconds.
    hold: called instead of sleeping ``transaction_hold_s`` while a transaction holds its
        items (a test holds one open with an event); conflicts are emulated when either
        is given.

    Attributes
    ----------
    credentials: what its clients sign with (``aws_access_key_id``, ``aws_secret_access_key``).
    app: the whole WSGI application (the authentication in front).
    writes: the :class:`AtomicWrites` behind the authentication (and the conflicts).
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        credentials: Mapping[str, str] | None = None,
        transaction_hold_s: float | None = None,
        hold: Callable[[], object] | None = None,
    ) -> None:
        self.credentials: dict[str, str] = dict(credentials) if credentials is not None else new_credentials()
        self.writes = AtomicWrites(DomainDispatcherApplication(create_backend_app))
        inner: Callable[..., Iterable[bytes]] = self.writes
        #: DynamoDB's transaction conflicts, when asked for (``transaction_hold_s``, ``hold``).
        self.conflicts: TransactionConflicts | None = None
        if transaction_hold_s is not None or hold is not None:
            hold_s = DEFAULT_HOLD_S if transaction_hold_s is None else transaction_hold_s
            self.conflicts = TransactionConflicts(self.writes, hold_s=hold_s, hold=hold)
            inner = self.conflicts
        #: The check of every request's signature.
        self.authentication = Authentication(inner, self.credentials)
        self.app: Callable[..., Iterable[bytes]] = self.authentication
        self._server: BaseWSGIServer = PooledWSGIServer(host, port, self.app, handler=TimedRequestHandler)
        # serve_forever looks for shutdown() every poll interval (0.5 s by default): every
        # embedded AWS closed would wait that long for nothing.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="moto-server", daemon=True
        )
        self._adapted = False

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_port)

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``: where this process's clients reach it."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Adapt moto (:data:`ADAPTATIONS`) and answer requests (the socket is already bound).

        Raises
        ------
        RuntimeError
            If it was started already (once only, as a thread).
        """
        if self._adapted or self._thread.ident is not None:
            raise RuntimeError("an embedded server starts once")
        ADAPTATIONS.acquire()
        try:
            self._thread.start()
        except BaseException:
            ADAPTATIONS.release()
            raise
        self._adapted = True

    def stop(self) -> None:
        """Stop answering, close the socket and release moto's adaptations."""
        try:
            if self._thread.is_alive():
                self._server.shutdown()
                self._thread.join()
            self._server.server_close()
        finally:
            if self._adapted:
                self._adapted = False
                ADAPTATIONS.release()

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
