"""The storm's feeder, in the parent process: the planned writes sent to S3 while the
workers run, in waves that keep the queue's visible backlog near :data:`BACKLOG`; a share
of the events sent again (a duplicate: the same event, its sequencer too) and, for late
overwrites, the replaced version's event delivered again after the new one's."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from mediajobs.domain.keys import encode_event_key
from mediajobs.local.embedded import LocalStack, listen_to_s3_events
from mediajobs.local.storm.plan import Upload

#: Uploads are sent in waves of FEED_WAVE while at most BACKLOG messages wait visible.
FEED_WAVE: Final = 20
BACKLOG: Final = 40


class Feeder:
    """Sends ``uploads`` (``contents`` their bytes) to ``stack``'s bucket from a thread of
    its own (:meth:`start`). It hears every "Object Created" event S3 sends from
    construction on, until :meth:`stop_listening`.

    Attributes
    ----------
    uploads, contents: the plan (:func:`~mediajobs.local.storm.plan.plan`).
    duplicated_events: events sent a second time.
    late_events: replaced versions' events delivered again after their overwrite's.
    sent: writes of the plan made so far (puts and deletes).
    put_at: when each put was answered, Unix seconds, by (key, version id): where an
        upload's latency to ready starts.
    pause_at: after this many writes, wait for :attr:`resume` before the next (0: never):
        a deployment that waits for the old workers to be idle then still has writes to
        come while it rolls out, at any size of storm.
    resume: set when the writes after :attr:`pause_at` may go on.
    """

    def __init__(self, stack: LocalStack, uploads: list[Upload], contents: list[bytes], *, pause_at: int = 0) -> None:
        self.pause_at = pause_at
        self.resume = threading.Event()
        self.uploads = uploads
        self.contents = contents
        self.duplicated_events = 0
        self.late_events = 0
        self.sent = 0
        self.put_at: dict[tuple[str, str | None], float] = {}
        self._stack = stack
        self._s3, self._sqs = stack.client("s3"), stack.client("sqs")
        self._lock = threading.Lock()
        # The events S3 sent, by key, in the order sent: a duplicate is the same event
        # again (its sequencer too), a late event the replaced version's real one.
        self._sent: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._thread: threading.Thread | None = None
        self.stop_listening = listen_to_s3_events(self._keep)

    def start(self, deadline: float) -> None:
        """Send every upload, in waves, from a daemon thread; a wave waits while the
        backlog is over :data:`BACKLOG`, until ``deadline`` (``time.monotonic()``)."""
        self._thread = threading.Thread(target=self._feed, args=(deadline,), name="uploads", daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        """Whether uploads are still being sent."""
        return self._thread is not None and self._thread.is_alive()

    def _keep(self, event: dict[str, Any]) -> None:
        if event.get("detail-type") == "Object Created":
            with self._lock:
                self._sent[event["detail"]["object"]["key"]].append(json.loads(json.dumps(event)))

    def _created_events(self, key: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._sent[encode_event_key(key)])

    def _backlog(self) -> int:
        attrs = self._sqs.get_queue_attributes(
            QueueUrl=self._stack.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"])

    def _feed(self, deadline: float) -> None:
        # Uploads arrive while the workers run, in waves that keep the visible backlog
        # near BACKLOG messages (moto's ReceiveMessage scans the whole queue).
        with ThreadPoolExecutor(max_workers=4) as pool:
            for start in range(0, len(self.uploads), FEED_WAVE):
                while self._backlog() > BACKLOG and time.monotonic() < deadline:
                    time.sleep(0.25)
                wave = self.uploads[start : start + FEED_WAVE]
                if start < self.pause_at < start + len(wave):  # the pause falls inside this wave
                    list(pool.map(self.upload, wave[: self.pause_at - start]))
                    wave = wave[self.pause_at - start :]
                if self.pause_at and start + FEED_WAVE > self.pause_at >= start:
                    self.resume.wait(max(0.0, deadline - time.monotonic()))
                list(pool.map(self.upload, wave))

    def upload(self, u: Upload) -> None:
        """Make the write ``u``: a put (its event sent again when ``u.twice``; the replaced
        version's event after it when ``u.late``), or a delete."""
        try:
            self._write(u)
        finally:
            with self._lock:
                self.sent += 1

    def _write(self, u: Upload) -> None:
        s3, bucket = self._s3, self._stack.bucket
        if u.kind == "delete":
            s3.delete_object(Bucket=bucket, Key=u.key)  # a delete marker
            return
        if u.kind == "delete_noncurrent":  # the oldest version S3 no longer serves, for good
            listed = s3.list_object_versions(Bucket=bucket, Prefix=u.key).get("Versions", [])
            old = [v for v in listed if v["Key"] == u.key and not v["IsLatest"]]
            if old:
                oldest = min(old, key=lambda v: v["LastModified"])
                s3.delete_object(Bucket=bucket, Key=u.key, VersionId=oldest["VersionId"])
            return
        if u.kind == "delete_version":  # the current version, for good
            with contextlib.suppress(s3.exceptions.ClientError):  # nothing current (a marker)
                current = s3.head_object(Bucket=bucket, Key=u.key)["VersionId"]
                s3.delete_object(Bucket=bucket, Key=u.key, VersionId=current)
            return
        data = self.contents[u.data_index]
        extra = {"ChecksumAlgorithm": "SHA256"} if u.checksum else {}
        put = s3.put_object(Bucket=bucket, Key=u.key, Body=data, **extra)
        with self._lock:
            self.put_at[(u.key, put.get("VersionId"))] = time.time()
        events_of_key = self._created_events(u.key)
        mine = [e for e in events_of_key if e["detail"]["object"].get("version-id") == put.get("VersionId")]
        if u.twice and mine:
            self._send(mine[-1])
            with self._lock:
                self.duplicated_events += 1
        if u.late and mine:
            before = events_of_key[: events_of_key.index(mine[-1])]
            if before:  # the replaced version's event, delivered again after this one
                self._send(before[-1])
                with self._lock:
                    self.late_events += 1

    def _send(self, event: dict[str, Any]) -> None:
        self._sqs.send_message(QueueUrl=self._stack.queue_url, MessageBody=json.dumps(event))
