"""Work folders: a worker empties its work folder when it starts (on Lambda every folder
there is a dead predecessor's), so the local tools give each worker running at once a
work folder of its own, and a live worker's folder survives another worker's start."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from mediajobs.bootstrap import build_service, default_adapters
from mediajobs.local.embedded import EmbeddedAws
from mediajobs.local.simulate import worker_work_dir
from mediajobs.service_layer.work import WORK_FOLDER_MARKER, WORK_FOLDER_PREFIX
from mediajobs.settings import Settings
from tests.conftest import REPO


def test_a_local_sessions_workers_have_a_work_folder_of_their_own(local_session):
    work_dir = Settings.from_env().work_dir
    assert work_dir == local_session._aws.work_dir and Path(work_dir).is_dir()
    assert Path(work_dir) != Path(tempfile.gettempdir())
    assert not Path(work_dir).name.startswith(WORK_FOLDER_PREFIX)  # never taken for a work folder itself


def test_a_worker_of_another_local_session_starting_leaves_this_sessions_live_folder_alone(local_session, monkeypatch):
    """Another process's session (another demo, another checkout's tests) starts a worker
    while this one works: its worker empties its own folder, not this one's."""
    live = Path(local_session._aws.work_dir) / f"{WORK_FOLDER_PREFIX}live"
    (live / "original").mkdir(parents=True)
    (live / WORK_FOLDER_MARKER).touch()
    try:
        monkeypatch.delenv("WORK_DIR")  # as in another process, which has not got this session's
        other = EmbeddedAws(REPO / "template.yaml", name="mediajobs-other-session")
        with other:
            assert other.work_dir != local_session._aws.work_dir
            assert other.stack is not None
            build_service(other.stack.settings())
        assert (live / "original").is_dir()
    finally:
        shutil.rmtree(live, ignore_errors=True)


def test_a_local_worker_starting_removes_what_a_dead_one_left_in_its_folder(local_session):
    dead = Path(local_session._aws.work_dir) / f"{WORK_FOLDER_PREFIX}dead"
    (dead / "original").mkdir(parents=True)
    (dead / WORK_FOLDER_MARKER).touch()
    build_service(
        settings := Settings.from_env(), adapters=default_adapters(settings, clients=local_session.stack.clients())
    )
    assert not dead.exists()


def test_simulated_workers_running_at_once_have_their_own_folders_and_a_replacement_inherits_its_slots(tmp_path):
    storm = tmp_path / "storm"
    slots = [worker_work_dir(storm, slot) for slot in range(3)]
    assert len(set(slots)) == 3 and all(s.parent == storm for s in slots)
    for folder in slots:
        folder.mkdir(parents=True)
    live = slots[0] / f"{WORK_FOLDER_PREFIX}live"
    live.mkdir()
    (live / WORK_FOLDER_MARKER).touch()
    # Slot 1's worker starts (or restarts) while slot 0's works: slot 0's folder survives.
    build_service(Settings(work_dir=str(slots[1])))
    assert live.exists()
    # Slot 0's worker crashed and is replaced: the replacement removes what it left.
    build_service(Settings(work_dir=str(slots[0])))
    assert not live.exists() and slots[0].is_dir()


def test_a_work_dir_the_user_sets_gets_a_private_folder_inside_it_and_is_kept(tmp_path, monkeypatch):
    """Two local runs given the same ``WORK_DIR`` must not empty each other's live folders,
    and nothing of the user's there is touched."""
    monkeypatch.setenv("WORK_DIR", str(tmp_path))
    (tmp_path / "mediajobs-out").mkdir()
    (tmp_path / "mediajobs-out" / "index.html").write_text("the user's")
    first = EmbeddedAws(REPO / "template.yaml", name="mediajobs-workdir")
    with first:
        assert first.work_dir is not None and Path(first.work_dir).parent == tmp_path
        assert first.stack is not None and first.stack.settings().work_dir == first.work_dir
        live = Path(first.work_dir) / f"{WORK_FOLDER_PREFIX}live"
        live.mkdir()
        (live / WORK_FOLDER_MARKER).touch()
        monkeypatch.setenv("WORK_DIR", str(tmp_path))  # another run, same WORK_DIR
        second = EmbeddedAws(REPO / "template.yaml", name="mediajobs-workdir-2")
        with second:
            assert second.work_dir != first.work_dir and second.stack is not None
            build_service(second.stack.settings())
        assert live.is_dir()
    assert tmp_path.is_dir() and (tmp_path / "mediajobs-out" / "index.html").read_text() == "the user's"


def test_an_embedded_aws_removes_the_work_folder_it_made_when_it_closes(monkeypatch):
    monkeypatch.delenv("WORK_DIR", raising=False)
    aws = EmbeddedAws(REPO / "template.yaml", name="mediajobs-ownworkdir")
    with aws:
        made = aws.work_dir
        assert made is not None and Path(made).is_dir() and aws.stack is not None
        assert aws.stack.settings().work_dir == made
    assert not Path(made).exists()
