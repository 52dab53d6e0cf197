"""bmff_problem (mediajobs.domain.inspections.containers): a file is truncated when a box it needs, or
the data its index points at, lies past its end; bytes after its last complete box are not
a cut. Files written here box by box (tests/media/bmff_write.py)."""

from __future__ import annotations

import struct

import pytest

from mediajobs.domain.inspections.containers import bmff_problem
from tests.conftest import MEDIA, load_script

bmff = load_script("bmff_write", MEDIA / "bmff_write.py")

JUNK = bytes(range(7, 256, 3)) * 4


def heif_file() -> bytes:
    item = bmff.Item(1, "hvc1", b"coded picture" * 10, [(bmff.ispe(64, 64), False)])
    return bmff.write_heif(bmff.Heif(("heic", "mif1", "heic"), 1, [item]))


def mp4_file(chunk_at_end_of: int = 0, co64: bool = False) -> bytes:
    """ftyp + moov (one track whose chunk offsets point into the mdat) + mdat."""
    ftyp = bmff.box("ftyp", b"isom", struct.pack(">I", 512), b"isomiso2mp41")
    samples = b"\0" * 400

    def moov(first_chunk: int) -> bytes:
        offsets = [first_chunk, first_chunk + 200 + chunk_at_end_of]
        if co64:
            table = bmff.full_box("co64", 0, 0, struct.pack(">I", 2), *(struct.pack(">Q", o) for o in offsets))
        else:
            table = bmff.full_box("stco", 0, 0, struct.pack(">I", 2), *(struct.pack(">I", o) for o in offsets))
        stbl = bmff.box("stbl", bmff.full_box("stsz", 0, 0, struct.pack(">II", 200, 2)), table)
        track = bmff.box("trak", bmff.box("mdia", bmff.box("minf", stbl)))
        return bmff.box("moov", bmff.full_box("mvhd", 0, 0, b"\0" * 96), track)

    first = len(ftyp) + len(moov(0)) + 8
    return ftyp + moov(first) + bmff.box("mdat", samples)


@pytest.mark.parametrize(
    "tail",
    [
        JUNK,
        b"\0\0\0",  # fewer bytes than a box header
        struct.pack(">I4s", 1_000_000, b"free") + b"\0" * 10,  # a box that is not needed, cut
        struct.pack(">I4s", 3, b"skip"),  # an impossible size on a box that is not needed
        b"\0" * 200,  # zero padding: a box of size 0 runs to the end
    ],
    ids=["junk", "short", "cut-free", "bad-skip", "zeros"],
)
@pytest.mark.parametrize("kind", ["heif", "mp4", "mp4-co64"])
def test_bytes_after_the_last_complete_box_are_not_a_cut(kind, tail):
    data = heif_file() if kind == "heif" else mp4_file(co64=kind.endswith("co64"))
    assert bmff_problem(data) is None
    assert bmff_problem(data + tail) is None


@pytest.mark.parametrize("kind", ["heif", "mp4"])
def test_a_needed_box_cut_is_truncated(kind):
    data = heif_file() if kind == "heif" else mp4_file()
    problem = bmff_problem(data[:-10])
    assert problem is not None and problem.reason == "truncated_image"
    assert "'mdat'" in problem.detail


def test_a_needed_box_header_in_the_trailing_bytes_that_runs_past_the_end_is_truncated():
    data = heif_file() + struct.pack(">I4s", 1_000_000, b"mdat") + b"\0" * 10
    problem = bmff_problem(data)
    assert problem is not None and problem.reason == "truncated_image"


def test_a_needed_box_with_an_impossible_size_is_corrupt():
    problem = bmff_problem(heif_file() + struct.pack(">I4s", 3, b"moov"))
    assert problem is not None and problem.reason == "corrupt_image"


def test_a_heif_cut_at_a_box_boundary_before_its_data_is_truncated():
    data = heif_file()
    mdat = data.find(b"mdat") - 4
    problem = bmff_problem(data[:mdat])
    assert problem is not None and problem.reason == "truncated_image"
    assert "item 1 (hvc1) needs bytes" in problem.detail
    assert bmff_problem(data[:mdat] + JUNK) is not None  # junk in its place is no data


def test_an_mp4_whose_samples_lie_past_its_last_complete_box_is_truncated():
    data = mp4_file()
    mdat = data.find(b"mdat") - 4
    problem = bmff_problem(data[:mdat])
    assert problem is not None and problem.reason == "truncated_image"
    assert "sample data at byte" in problem.detail
    problem = bmff_problem(mp4_file(chunk_at_end_of=10_000, co64=True))
    assert problem is not None and "sample data" in problem.detail


def test_without_meta_or_moov_a_cut_is_still_truncated_and_a_missing_index_is_left_to_ffprobe():
    ftyp = bmff.box("ftyp", b"qt  ", struct.pack(">I", 512), b"qt  ")
    mdat = bmff.box("mdat", b"\0" * 100)
    assert bmff_problem(ftyp + mdat) is None  # V08: ffprobe says "moov atom not found"
    problem = bmff_problem(ftyp + bmff.box("wide", b"") + JUNK)
    assert problem is not None and problem.reason == "truncated_image"


@pytest.mark.parametrize("largest_at", [0, 150_000, 299_999])
def test_a_chunk_offset_table_larger_than_a_slice_is_read_whole(largest_at):
    """The offset table is read in slices (its memory must not grow with a 45-million-entry
    table); an offset past the end found in any slice, the last one included, is a cut."""
    from mediajobs.domain.inspections import containers

    count = 300_000  # 1.2 MB of stco: more than one slice
    assert count * 4 > containers._OFFSET_SLICE_BYTES
    ftyp = bmff.box("ftyp", b"isom", struct.pack(">I", 512), b"isomiso2mp41")

    def build(past_end: bool) -> bytes:
        offsets = [64] * count
        if past_end:
            offsets[largest_at] = 50_000_000
        table = bmff.full_box("stco", 0, 0, struct.pack(">I", count), struct.pack(f">{count}I", *offsets))
        stbl = bmff.box("stbl", bmff.full_box("stsz", 0, 0, struct.pack(">II", 1, count)), table)
        moov = bmff.box(
            "moov", bmff.full_box("mvhd", 0, 0, b"\0" * 96), bmff.box("trak", bmff.box("mdia", bmff.box("minf", stbl)))
        )
        return ftyp + moov + bmff.box("mdat", b"\0" * 400_000)

    assert bmff_problem(build(past_end=False)) is None
    problem = bmff_problem(build(past_end=True))
    assert problem is not None and problem.reason == "truncated_image"


def test_reading_a_huge_chunk_offset_table_takes_memory_of_a_slice_not_of_the_table():
    """5 million entries (20 MB): the walk's own allocations stay within a few slices."""
    import tracemalloc

    from mediajobs.domain.inspections import containers

    count = 5_000_000
    ftyp = bmff.box("ftyp", b"isom", struct.pack(">I", 512), b"isomiso2mp41")
    table = bmff.full_box("stco", 0, 0, struct.pack(">I", count), struct.pack(">I", 64) * count)
    stbl = bmff.box("stbl", bmff.full_box("stsz", 0, 0, struct.pack(">II", 1, count)), table)
    moov = bmff.box(
        "moov", bmff.full_box("mvhd", 0, 0, b"\0" * 96), bmff.box("trak", bmff.box("mdia", bmff.box("minf", stbl)))
    )
    data = ftyp + moov + bmff.box("mdat", b"\0" * 128)
    tracemalloc.start()
    try:
        assert bmff_problem(data) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * containers._OFFSET_SLICE_BYTES, peak
