"""A long video split into segments and an audio part, through the embedded AWS and the real
handler (``SEGMENT_SECONDS`` lowered so that a 6 s clip splits in three): each part and the
join commit once, under crashes at every boundary of the fan-out and under duplicate
deliveries of every message, and the joined rendition has the source's frames and one
continuous audio track.

A crash is a ``BaseException`` raised from the observer's hook or an adapter (like a process
dying: no release, no acknowledgement); the crashed batch is made visible again (its
visibility timeout "ran out") and a second worker, whose clock is past every lease, goes on
-- never a sleep.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from mediajobs.adapters.ffmpeg import find_binaries
from mediajobs.bootstrap import active_recipes, build_service, default_adapters
from mediajobs.domain.jobs import JobState
from mediajobs.domain.keys import sha256_hex
from mediajobs.domain.parts import part_specs
from mediajobs.domain.plan import Where, plan_jobs
from mediajobs.local.session import Collector
from mediajobs.settings import Settings
from tests.fakes import Wrapping
from tests.functional.test_crash_points import esm_for

pytestmark = pytest.mark.subprocess

#: 6 s of 30 fps cut every 2 s: three segments (keyframes every second) and the audio.
SEGMENT_S = 2.0
PARTS = 4
FRAMES = 180


class Crash(BaseException):
    """The worker process dies here."""


class CrashAt(Collector):
    """Dies at the ``nth`` time ``point`` is reached for a job ``which`` accepts."""

    def __init__(self, point: str, which, nth: int = 1) -> None:
        super().__init__()
        self.point, self.which, self.nth, self.seen = point, which, nth, 0

    def step(self, point: str, job_key: str) -> None:
        if point == self.point and self.which(job_key):
            self.seen += 1
            if self.seen == self.nth:
                raise Crash(f"{point} {job_key[:12]}")


def split_settings() -> Settings:
    return dataclasses.replace(Settings.from_env(), segment_s=SEGMENT_S, split_above_s=0.001)


def clip(tmp_path: Path, tone_hz: int) -> bytes:
    """6 s of 320x180 at 30 fps with a tone (``tone_hz`` makes the bytes the test's own), a
    keyframe every 30 frames."""
    out = tmp_path / "clip.mp4"
    subprocess.run(
        [find_binaries().ffmpeg, "-nostdin", "-v", "error", "-f", "lavfi", "-i",
         "testsrc2=size=320x180:rate=30:duration=6", "-f", "lavfi", "-i", f"sine=frequency={tone_hz}:duration=6",
         "-c:v", "libx264", "-g", "30", "-keyint_min", "30", "-sc_threshold", "0", "-c:a", "aac", "-shortest",
         "-f", "mp4", str(out)],
        check=True,
    )  # fmt: skip
    return out.read_bytes()


class Flow:
    """One clip through a worker that may crash, then a second one past every lease."""

    def __init__(self, session, tmp_path: Path, tone_hz: int, data: bytes | None = None) -> None:
        self.session = session
        self.settings = split_settings()
        self.data = data if data is not None else clip(tmp_path, tone_hz)
        self.key = f"originals/split/{uuid.uuid4().hex}.mp4"
        where = Where(
            session.stack.bucket,
            self.key,
            self.settings.derivatives_prefix,
            self.settings.policy_version,
            self.settings.keys,
        )
        video = next(
            j for j in plan_jobs(sha256_hex(self.data), "video", active_recipes(), where) if j.recipe.id == "web-video"
        )
        self.parent = video.key
        self.spec = video.spec
        self.crashes = 0
        self.renders: list[str] = []
        self.bodies: list[str] = []

    def part_keys(self) -> list[str]:
        row = self.session.stack.ledger().get(self.parent)
        assert row is not None and row.split is not None
        return [
            s.job_key
            for s in part_specs(self.spec, row.split, self.settings.derivatives_prefix, self.settings.keys_for)
        ]

    def service(self, observer: Collector, skew_s: float = 0.0, wrap=None):
        adapters = default_adapters(self.settings, clients=self.session.stack.clients())
        if skew_s:
            adapters = dataclasses.replace(adapters, clock=lambda: time.time() + skew_s)
        if wrap is not None:
            adapters = wrap(adapters)
        return build_service(self.settings, adapters=adapters, observer=observer)

    def run(self, observer: Collector | None = None, wrap=None) -> Collector:
        """Upload the clip and drain the queue: with ``observer`` (and ``wrap``) until it
        crashes, then with a worker past every lease."""
        self.session.s3.put_object(Bucket=self.session.stack.bucket, Key=self.key, Body=self.data)
        first = observer or Collector()
        a = esm_for(self.session, self.service(first, wrap=wrap))
        try:
            while a.poll_once():
                pass
        except Crash:
            self.crashes += 1
            a.expire(a.current_batch)
        self.renders += first.renders
        second = Collector()
        b = esm_for(self.session, self.service(second, skew_s=self.settings.lease_s + 60))
        while b.poll_once():
            pass
        self.renders += second.renders
        self.bodies = a.stats.bodies + b.stats.bodies
        self.results = [r for c in (first, second) for rs in c.results.values() for r in rs]
        assert b.in_flight() == 0
        return second

    def redeliver_everything(self) -> list[str]:
        """Every message delivered so far, sent again and drained: the renders it caused."""
        stack = self.session.stack
        for body in self.bodies:
            self.session.sqs.send_message(QueueUrl=stack.queue_url, MessageBody=body)
        again = Collector()
        b = esm_for(self.session, self.service(again, skew_s=self.settings.lease_s + 60))
        while b.poll_once():
            pass
        return again.renders

    def check_one_committed_set(self) -> dict:
        stack, s3 = self.session.stack, self.session.s3
        row = stack.ledger().get(self.parent)
        assert row is not None and row.state == JobState.DONE
        listed = s3.list_objects_v2(Bucket=stack.bucket, Prefix=f"derivatives/{self.parent}/")
        assert sorted(o["Key"].rsplit("/", 1)[1] for o in listed["Contents"]) == [
            "manifest.json", "poster.jpg", "source.mp4",
        ]  # fmt: skip
        parts = self.part_keys()
        assert len(parts) == PARTS
        for key in parts:
            part = stack.ledger().get(key)
            assert part is not None and part.state == JobState.DONE and part.waiting == frozenset()
        asset = stack.assets().get(stack.bucket, self.key)
        assert asset is not None and asset.state == "ready"
        assert self.session.dead_letters() == 0
        manifest = json.loads(s3.get_object(Bucket=stack.bucket, Key=row.manifest_key)["Body"].read())
        return manifest


def test_a_split_video_commits_each_part_and_the_join_once_with_the_sources_frames(local_session, tmp_path):
    flow = Flow(local_session, tmp_path, 440)
    downloads: list[str] = []

    def count_downloads(adapters):
        store = adapters.store

        def download(ref, dest, *, etag=None):
            downloads.append(ref.key)
            return store.download(ref, dest, etag=etag)

        return dataclasses.replace(adapters, store=Wrapping(store, download=download))

    flow.run(wrap=count_downloads)
    # The original is read whole once, by its delivery (which splits); the parts and the join
    # read it by byte ranges through a presigned URL. The join reads each part's outputs.
    assert downloads.count(flow.key) == 1
    assert sum(1 for k in downloads if k.startswith("derivatives/")) == PARTS
    manifest = flow.check_one_committed_set()
    assert manifest["decisions"]["segments"]["count"] == 3
    assert [s["start_s"] for s in manifest["decisions"]["segments"]["segments"]] == [0.0, 2.0, 4.0]
    counts = Counter(flow.renders)  # the video's job runs twice: it splits, then it joins
    assert [counts[k] for k in [*flow.part_keys(), flow.parent]] == [1] * PARTS + [2]
    assert flow.results[0].source.key == flow.key and flow.results[0].state == "split"  # acknowledged, split

    rendition = tmp_path / "source.mp4"
    stack = local_session.stack
    rendition.write_bytes(
        local_session.s3.get_object(Bucket=stack.bucket, Key=f"derivatives/{flow.parent}/source.mp4")["Body"].read()
    )
    ffprobe = find_binaries().ffprobe
    video = json.loads(subprocess.run(
        [ffprobe, "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_streams", "-show_format",
         "-of", "json", str(rendition)], capture_output=True, text=True, check=True).stdout)  # fmt: skip
    assert int(video["streams"][0]["nb_read_frames"]) == FRAMES
    assert abs(float(video["format"]["duration"]) - 6.0) <= 1 / 30 + 0.03  # a frame (and AAC's last frame)
    audio = subprocess.run(
        [ffprobe, "-v", "error", "-select_streams", "a:0", "-show_entries", "packet=pts_time,duration_time",
         "-of", "csv=p=0", str(rendition)], capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    packets = [tuple(map(float, line.split(",")[:2])) for line in audio]
    gaps = [b[0] - (a[0] + a[1]) for a, b in zip(packets, packets[1:], strict=False)]
    assert packets and max(abs(g) for g in gaps) < 1024 / 44100  # one track, no gap over an AAC frame

    assert flow.redeliver_everything() == []  # every message again: no render


def test_the_assets_progress_is_the_share_of_the_parts_seconds_committed(local_session, tmp_path):
    flow = Flow(local_session, tmp_path, 523)
    seen: list[float] = []
    stack = local_session.stack

    def record_progress(adapters):
        assets = adapters.assets

        def progress(bucket, key, sequencer, job_key, fraction, *, now_s):
            if job_key == flow.parent:
                seen.append(round(fraction, 3))
            return assets.progress(bucket, key, sequencer, job_key, fraction, now_s=now_s)

        return dataclasses.replace(adapters, assets=Wrapping(assets, progress=progress))

    flow.run(wrap=record_progress)
    # three 2 s segments and the 6 s audio, in that order: 2/12, 4/12, 6/12 (the audio last: 12/12)
    assert seen[:3] == [0.167, 0.333, 0.5]
    assert stack.assets().get(stack.bucket, flow.key).state == "ready"


@pytest.mark.parametrize(
    ("tone_hz", "point", "which", "nth", "rerendered"),
    [
        (601, "claimed", "part", 2, None),  # a segment claimed, its render not started
        (602, "output_stored", "part", 2, "part"),  # inside a segment: an output stored
        (603, "done", "part", PARTS, None),  # the last part committed, the join not requested yet
        (604, "claimed", "parent", 2, None),  # the join claimed, not started
        (605, "output_stored", "parent", 1, "parent"),  # inside the join: a rendition stored
    ],
)
def test_a_crash_at_each_boundary_ends_with_one_committed_set(
    local_session, tmp_path, tone_hz, point, which, nth, rerendered
):
    flow = Flow(local_session, tmp_path, tone_hz)
    is_parent = (lambda k: k == flow.parent) if which == "parent" else (lambda k: k != flow.parent and len(k) == 64)
    crash = CrashAt(point, lambda k: is_parent(k) and k != _placeholder_key(flow), nth)
    flow.run(crash)
    assert flow.crashes == 1
    flow.check_one_committed_set()
    counts = Counter(k for k in flow.renders if k in {*flow.part_keys(), flow.parent})
    counts[flow.parent] -= 1  # its split run
    again = [k for k, n in counts.items() if n == 2]
    assert all(n in (1, 2) for n in counts.values()) and len(again) == (0 if rerendered is None else 1)
    if rerendered == "parent":
        assert again == [flow.parent]
    assert flow.redeliver_everything() == []


def test_a_crash_between_the_split_and_its_requests_is_finished_by_the_originals_redelivery(local_session, tmp_path):
    flow = Flow(local_session, tmp_path, 880)
    sent: list[str] = []

    def die_at_the_first_request(adapters):
        queue = adapters.queue

        def resend(queue_arn, body, delay_s, *, handovers=0):
            if not sent:
                sent.append(body)
                raise Crash("after the split, before its requests")
            return queue.resend(queue_arn, body, delay_s, handovers=handovers)

        return dataclasses.replace(adapters, queue=Wrapping(queue, resend=resend))

    flow.run(wrap=die_at_the_first_request)
    assert flow.crashes == 1
    flow.check_one_committed_set()
    counts = Counter(k for k in flow.renders if k in {*flow.part_keys(), flow.parent})
    counts[flow.parent] -= 1  # its split run
    assert set(counts.values()) == {1}  # nothing rendered twice
    assert flow.redeliver_everything() == []


def _placeholder_key(flow: Flow) -> str:
    where = Where(
        flow.session.stack.bucket,
        flow.key,
        flow.settings.derivatives_prefix,
        flow.settings.policy_version,
        flow.settings.keys,
    )
    jobs = plan_jobs(sha256_hex(flow.data), "video", active_recipes(), where)
    return next(j.key for j in jobs if j.key != flow.parent)


def test_the_parts_are_collected_after_the_join_and_a_video_collected_later_renders_again(local_session, tmp_path):
    """The join releases its parts (a candidate each): the collection deletes their outputs
    (no asset ever references a part). Deleted, the video is collected too; the same bytes
    uploaded again split again, render the parts again and join: ready, one set."""
    from mediajobs.bootstrap import build_collector
    from mediajobs.local.session import local_adapters

    flow = Flow(local_session, tmp_path, 990)
    flow.run()
    flow.check_one_committed_set()
    stack, s3 = local_session.stack, local_session.s3
    parts = flow.part_keys()
    candidates = {c.job_key for c in stack.assets().candidates(released_before_s=2**40, limit=1000)}
    assert set(parts) <= candidates and flow.parent not in candidates

    def collect() -> None:
        build_collector(flow.settings, local_adapters(stack, flow.settings)).run(grace_s=0, limit=1000)

    def listing(key: str) -> list[str]:
        return [
            o["Key"] for o in s3.list_objects_v2(Bucket=stack.bucket, Prefix=f"derivatives/{key}/").get("Contents", [])
        ]

    collect()
    assert [stack.ledger().get(k).state for k in parts] == [JobState.COLLECTED] * PARTS
    assert all(listing(k) == [] for k in parts) and len(listing(flow.parent)) == 3  # the video's set stays

    s3.delete_object(Bucket=stack.bucket, Key=flow.key)  # a delete marker: the asset lets go of the set
    b = esm_for(local_session, flow.service(Collector()))
    while b.poll_once():
        pass
    collect()
    assert stack.ledger().get(flow.parent).state == JobState.COLLECTED and listing(flow.parent) == []

    flow.key = f"originals/split/{uuid.uuid4().hex}.mp4"  # the same bytes, another key
    flow.run()
    manifest = flow.check_one_committed_set()
    assert manifest["decisions"]["segments"]["count"] == 3
    assert [stack.ledger().get(k).state for k in flow.part_keys()] == [JobState.DONE] * PARTS


def test_a_copy_uploaded_while_its_video_is_split_is_answered_at_once_and_ready_with_it(local_session, tmp_path):
    """The same bytes under a second key, delivered while the parts run: its delivery finds
    the video's job waiting for its parts with every request sent, so it is acknowledged
    (``split``), not sent back for a lease; the join makes both assets ready."""
    flow = Flow(local_session, tmp_path, 1234)
    stack, s3 = local_session.stack, local_session.s3
    copy = f"originals/split/{uuid.uuid4().hex}.mp4"
    s3.put_object(Bucket=stack.bucket, Key=copy, Body=flow.data)  # the copy's event first: it splits
    flow.run()  # the original's second: it finds the job split, every request sent
    assert flow.crashes == 0
    flow.check_one_committed_set()
    firsts = {r.source.key: r for r in reversed(flow.results)}  # each key's first result
    assert (firsts[copy].state, firsts[flow.key].state) == ("split", "split")  # neither sent back as busy
    view = stack.assets().get(stack.bucket, copy)
    assert view is not None and view.state == "ready"
    assert {j.job_key for j in view.jobs} >= {flow.parent}


class CuttingProxy:
    """An HTTP proxy in front of the embedded S3 that answers every GET with its headers and
    the first ``keep`` bytes of the body, then closes the connection (an S3 read that breaks
    mid-body, again on every reconnect)."""

    def __init__(self, keep: int = 20_000) -> None:
        import http.client
        import http.server
        import socketserver
        import threading

        self.targets: list = []
        self.cut = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                target = proxy.targets[0]
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                headers = {
                    "Host": target.netloc,
                    **({"Range": self.headers["Range"]} if "Range" in self.headers else {}),
                }
                conn.request("GET", self.path, headers=headers)
                answer = conn.getresponse()
                body = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:keep])
                self.wfile.flush()
                if len(body) > keep:
                    proxy.cut += 1
                    self.connection.shutdown(2)
                    self.close_connection = True

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wrap(self, adapters):
        from urllib.parse import urlsplit

        store = adapters.store

        def presigned_get(ref, *, expires_s):
            real = urlsplit(store.presigned_get(ref, expires_s=expires_s))
            self.targets.append(real)
            return f"http://127.0.0.1:{self.server.server_address[1]}{real.path}?{real.query}"

        return dataclasses.replace(adapters, store=Wrapping(store, presigned_get=presigned_get))


def test_a_part_whose_read_of_the_original_breaks_is_retried_never_committed_short(local_session, tmp_path):
    """ffmpeg exits 0 with what it read when its input's connection breaks mid-body (and
    again on each reconnect): the part is a transient failure, nothing of it is committed,
    and the next attempt renders it whole -- the joined rendition has all 180 frames."""
    from mediajobs.domain.errors import TransientFailure

    flow = Flow(local_session, tmp_path, 1777)
    stack = local_session.stack
    stack_s3 = local_session.s3
    stack_s3.put_object(Bucket=stack.bucket, Key=flow.key, Body=flow.data)
    esm_for(local_session, flow.service(Collector())).poll_once()  # the original's delivery: the split
    part = flow.part_keys()[1]  # the middle segment
    proxy = CuttingProxy()
    try:
        with pytest.raises(TransientFailure, match="cut short"):
            flow.service(Collector(), wrap=proxy.wrap).run_request(part)
    finally:
        proxy.server.shutdown()
    assert proxy.cut >= 1
    row = stack.ledger().get(part)
    assert row is not None and row.state == JobState.TRANSIENT_FAILURE and not row.outputs
    listed = stack_s3.list_objects_v2(Bucket=stack.bucket, Prefix=f"derivatives/{part}/")
    assert "Contents" not in listed  # nothing of the short read was written
    later = esm_for(local_session, flow.service(Collector(), skew_s=flow.settings.lease_s + 60))
    while later.poll_once():
        pass
    flow.check_one_committed_set()
    out = tmp_path / "joined.mp4"
    out.write_bytes(
        stack_s3.get_object(Bucket=stack.bucket, Key=f"derivatives/{flow.parent}/source.mp4")["Body"].read()
    )
    counted = subprocess.run(
        [find_binaries().ffprobe, "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
         "stream=nb_read_frames", "-of", "csv=p=0", str(out)], capture_output=True, text=True, check=True)  # fmt: skip
    assert int(counted.stdout.strip()) == FRAMES


def test_a_join_that_finds_a_part_collected_waits_for_it_again_and_it_renders_again(local_session, tmp_path):
    """The video collected (its asset deleted) while its joined parts still wait for their
    collection; the same bytes uploaded again split again and find the parts done, so the
    join is requested at once -- then the collection deletes the parts. The join does not
    fail: it waits for them again, they render again, and the asset is ready."""
    import time as clock

    from mediajobs.bootstrap import build_collector
    from mediajobs.local.session import local_adapters

    flow = Flow(local_session, tmp_path, 2468)
    flow.run()
    flow.check_one_committed_set()
    stack, s3 = local_session.stack, local_session.s3
    parts = flow.part_keys()
    s3.delete_object(Bucket=stack.bucket, Key=flow.key)
    b = esm_for(local_session, flow.service(Collector()))
    while b.poll_once():
        pass
    ledger = stack.ledger()  # the video's set alone collected, as a collection run whose batch ends there
    now = int(clock.time())
    assert ledger.begin_collection(flow.parent, "c1", lease_until_s=now + 60, now_s=now, seen=ledger.get(flow.parent))
    for obj in s3.list_objects_v2(Bucket=stack.bucket, Prefix=f"derivatives/{flow.parent}/").get("Contents", []):
        s3.delete_object(Bucket=stack.bucket, Key=obj["Key"])
    ledger.end_collection(flow.parent, "c1", collected=True, now_s=now)
    assert [ledger.get(k).state for k in parts] == [JobState.DONE] * PARTS

    flow.key = f"originals/split/{uuid.uuid4().hex}.mp4"  # the same bytes again
    s3.put_object(Bucket=stack.bucket, Key=flow.key, Body=flow.data)
    esm_for(local_session, flow.service(Collector())).poll_once()  # split again: every part done, join requested
    assert ledger.get(flow.parent).state == JobState.REQUESTED
    build_collector(flow.settings, local_adapters(stack, flow.settings)).run(grace_s=0, limit=1000)
    assert [ledger.get(k).state for k in parts] == [JobState.COLLECTED] * PARTS  # released by the first join

    again = Collector()
    later = esm_for(local_session, flow.service(again))
    while later.poll_once():
        pass
    manifest = flow.check_one_committed_set()
    assert manifest["decisions"]["segments"]["count"] == 3
    assert sorted(k for k in again.renders if k in parts) == sorted(parts)  # each rendered again, once


def test_a_split_run_by_a_job_request_whose_part_requests_are_lost_is_finished_by_its_redelivery(
    local_session, tmp_path
):
    """A video job run by a job request (a backfill's), not an upload's event: its worker
    splits it and dies before requesting the parts. The request comes back after its
    visibility timeout, finds the video waiting past its splitter's window, and requests the
    parts: ready, each part rendered once."""
    from mediajobs.domain.plan import PlannedJob

    flow = Flow(local_session, tmp_path, 3579)
    stack, s3 = local_session.stack, local_session.s3
    s3.put_object(Bucket=stack.bucket, Key=flow.key, Body=flow.data)
    esm_for(local_session, flow.service(Collector())).poll_once()  # the upload's delivery
    # The video's job as a new recipe set would request it: its row and its request alone.
    ledger = stack.ledger()
    for key in [*flow.part_keys(), flow.parent]:
        stack.job_model()(key).delete()  # as if the upload had run no video recipe
    recipe = next(r for r in active_recipes()["video"] if r.id == "web-video")
    flow.service(Collector()).request([PlannedJob(recipe, flow.spec)])

    def die_at_the_first_part_request(adapters):
        queue = adapters.queue

        def resend(queue_arn, body, delay_s, *, handovers=0):
            if json.loads(body)["job_key"] != flow.parent:
                raise Crash("after the split, before its part requests")
            return queue.resend(queue_arn, body, delay_s, handovers=handovers)

        return dataclasses.replace(adapters, queue=Wrapping(queue, resend=resend))

    a = esm_for(local_session, flow.service(Collector(), wrap=die_at_the_first_part_request))
    with pytest.raises(Crash):
        while a.poll_once():
            pass
    a.expire(a.current_batch)
    assert ledger.get(flow.parent).state == JobState.WAITING
    assert [ledger.get(k).state for k in flow.part_keys()] == [JobState.REQUESTED] * PARTS
    later = Collector()
    b = esm_for(local_session, flow.service(later, skew_s=flow.settings.lease_s + 60))
    while b.poll_once():
        pass
    assert b.in_flight() == 0
    assert ledger.get(flow.parent).state == JobState.DONE
    assert sorted(k for k in later.renders if k in flow.part_keys()) == sorted(flow.part_keys())


def test_an_audio_track_starting_after_the_video_keeps_its_place_when_joined(local_session, tmp_path):
    """Audio from 0.3 s, video from 0: the audio job's track keeps its start, and the join
    moves it there (ffmpeg starts each input at 0): the joined rendition's audio starts and
    ends against its video as the source's does, within a frame, and the asset is ready."""
    ffmpeg, ffprobe = find_binaries().ffmpeg, find_binaries().ffprobe
    video, tone = tmp_path / "v.mp4", tmp_path / "a.m4a"
    subprocess.run([ffmpeg, "-nostdin", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=320x180:rate=30:duration=6",
                    "-c:v", "libx264", "-g", "30", str(video)], check=True)  # fmt: skip
    subprocess.run([ffmpeg, "-nostdin", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=777:duration=5.7",
                    "-c:a", "aac", str(tone)], check=True)  # fmt: skip
    source = tmp_path / "late.mp4"
    subprocess.run([ffmpeg, "-nostdin", "-v", "error", "-i", str(video), "-itsoffset", "0.3", "-i", str(tone),
                    "-map", "0:v", "-map", "1:a", "-c", "copy", str(source)], check=True)  # fmt: skip
    flow = Flow(local_session, tmp_path, 0, data=source.read_bytes())
    flow.run()
    flow.check_one_committed_set()
    out = tmp_path / "joined.mp4"
    stack = local_session.stack
    out.write_bytes(
        local_session.s3.get_object(Bucket=stack.bucket, Key=f"derivatives/{flow.parent}/source.mp4")["Body"].read()
    )

    def starts_and_ends(path: Path) -> dict[str, tuple[float, float]]:
        entries = "stream=codec_type,start_time,duration"
        argv = [ffprobe, "-v", "error", "-show_entries", entries, "-of", "csv=p=0", str(path)]
        listed = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        rows = [line.split(",") for line in listed.split()]
        return {kind: (float(start), float(start) + float(length)) for kind, start, length in rows}

    joined, original = starts_and_ends(out), starts_and_ends(source)
    for edge in (0, 1):
        offset_joined = joined["audio"][edge] - joined["video"][edge]
        offset_source = original["audio"][edge] - original["video"][edge]
        assert abs(offset_joined - offset_source) <= 1 / 30, (edge, offset_joined, offset_source)
    assert joined["audio"][0] > 0.25  # it did not move to 0
