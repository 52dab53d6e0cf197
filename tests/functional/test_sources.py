"""The source index against the moto server, and reads pinned to what HeadObject saw."""

from __future__ import annotations

import uuid

import pytest

from mediajobs.adapters.s3 import S3Store
from mediajobs.adapters.sources import Reading, SourceIndex
from mediajobs.domain.errors import TransientFailure
from mediajobs.domain.jobs import KnownSource, ObjectRef


@pytest.fixture()
def index(local_session) -> SourceIndex:
    stack = local_session.stack
    return stack.sources()


def test_a_reading_marker_sends_others_back_until_its_lease_ends(index):
    sid = f"sha256:{uuid.uuid4().hex}"
    assert index.begin_reading(sid, "a", now_s=1000, lease_until_s=1010) is None
    assert index.begin_reading(sid, "b", now_s=1005, lease_until_s=1015) == Reading(1010, "a")
    assert index.lookup(sid, now_s=1005) == Reading(1010, "a")
    assert index.lookup(sid, now_s=1011) is None  # the reader died: its marker no longer counts
    assert index.begin_reading(sid, "b", now_s=1011, lease_until_s=1021) is None


def test_remembering_replaces_the_marker_and_abandoning_frees_it(index):
    known, gone = f"sha256:{uuid.uuid4().hex}", f"sha256:{uuid.uuid4().hex}"
    index.begin_reading(known, "a", now_s=1000, lease_until_s=1010)
    index.remember([known], KnownSource("c" * 64, 12, "image"), now_s=1001)
    assert index.lookup(known, now_s=1002) == KnownSource("c" * 64, 12, "image")
    assert index.begin_reading(known, "b", now_s=1003, lease_until_s=1013) == KnownSource("c" * 64, 12, "image")
    index.begin_reading(gone, "a", now_s=1000, lease_until_s=1010)
    index.release(gone, "not-the-token")  # only the holder's marker is removed
    assert index.lookup(gone, now_s=1001) == Reading(1010, "a")
    index.release(gone, "a")
    assert index.lookup(gone, now_s=1001) is None


def test_a_read_is_pinned_to_the_etag_head_object_saw(local_session, tmp_path):
    """Without versioning, an overwrite between HeadObject and GetObject must not be hashed
    under the first object's ETag: the read is conditional and fails transiently."""
    s3 = local_session.s3
    bucket = f"unversioned-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="originals/x.jpg", Body=b"first")
    store = S3Store(s3)
    ref = ObjectRef(bucket, "originals/x.jpg")
    head = store.head(ref)
    assert (head.version_id, head.size_bytes, head.sha256) == (None, 5, None)
    s3.put_object(Bucket=bucket, Key="originals/x.jpg", Body=b"second!")
    with pytest.raises(TransientFailure, match="changed while being read"):
        store.download(ref, tmp_path / "x", etag=head.etag)
    assert store.download(ref, tmp_path / "x", etag=store.head(ref).etag).size_bytes == 7


def test_only_a_full_object_sha256_checksum_names_the_content(local_session):
    s3, bucket = local_session.s3, local_session.stack.bucket
    s3.put_object(Bucket=bucket, Key="originals/sum.bin", Body=b"abc", ChecksumAlgorithm="SHA256")
    s3.put_object(Bucket=bucket, Key="originals/crc.bin", Body=b"abc", ChecksumAlgorithm="CRC32")
    store = S3Store(s3)
    assert store.head(ObjectRef(bucket, "originals/sum.bin")).sha256 == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert store.head(ObjectRef(bucket, "originals/crc.bin")).sha256 is None


def test_a_composite_multipart_checksum_is_not_a_content_hash():
    """S3 answers COMPOSITE (and a ``-<parts>`` suffix) for multipart uploads; moto does not
    make them, so a stub client stands in for S3's answer."""

    class Stub:
        def head_object(self, **_):
            return {
                "ContentLength": 3,
                "ETag": '"e-2"',
                "ChecksumSHA256": "uhgWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=-2",
                "ChecksumType": "COMPOSITE",
            }

    assert S3Store(Stub()).head(ObjectRef("b", "originals/big.mov")).sha256 is None
