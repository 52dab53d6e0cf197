"""The HEIF item reader (mediajobs.domain.inspections.heif_items) on structures written here box by box
(tests/media/bmff_write.py) and on codec headers written bit by bit from the specifications
(AV1 5.5.1, H.265 7.3.2.2.1): no decoder runs."""

from __future__ import annotations

import struct

import pytest
from PIL import Image, ImageOps

from mediajobs.domain.errors import PermanentFailure
from mediajobs.domain.inspections import heif_items
from mediajobs.domain.inspections.heif_items import (
    CleanAperture,
    Decoder,
    Mirror,
    Overlay,
    Placement,
    Rotation,
    av1_frame_sizes,
    av1_sequence_header_size,
    clean_aperture,
    exif_orientation,
    extent_problem,
    hevc_sps_size,
    primary_image,
    read_structure,
)
from tests.conftest import MEDIA, load_script

bmff = load_script("bmff_write", MEDIA / "bmff_write.py")

LIBAVIF = Decoder("libavif", frozenset({"av01"}), frozenset({"grid"}))
LIBHEIF = Decoder("libheif", frozenset({"hvc1"}), frozenset({"grid", "iovl", "iden"}))


class Bits:
    """Writes fields most significant bit first, as the specifications spell them."""

    def __init__(self) -> None:
        self.text = ""

    def f(self, n: int, value: int) -> Bits:
        self.text += format(value, f"0{n}b") if n else ""
        return self

    def ue(self, value: int) -> Bits:
        code = format(value + 1, "b")
        self.text += "0" * (len(code) - 1) + code
        return self

    def bytes(self) -> bytes:
        text = self.text + "1"  # trailing bits
        text += "0" * (-len(text) % 8)
        return int(text, 2).to_bytes(len(text) // 8, "big")


def reduced_sequence_header(width: int, height: int) -> bytes:
    """An AV1 sequence header OBU payload, reduced_still_picture_header = 1 (AV1 5.5.1)."""
    bits = Bits().f(3, 0).f(1, 1).f(1, 1).f(5, 8).f(4, 15).f(4, 15).f(16, width - 1).f(16, height - 1)
    return bits.f(20, 0).bytes()  # the rest of the header: its content does not matter here


def obu(kind: int, payload: bytes) -> bytes:
    """An OBU with its size field (AV1 5.3)."""
    return bytes([(kind << 3) | 2]) + bytes([len(payload)]) + payload if len(payload) < 128 else b""


def av1_data(width: int, height: int) -> bytes:
    """An AV1 temporal unit as an av01 item holds it: temporal delimiter, sequence header, a frame."""
    return obu(2, b"") + obu(1, reduced_sequence_header(width, height)) + obu(6, b"\x10\x00")


def av01(item_id: int, width: int, height: int, *, declared: tuple[int, int] | None = None, hidden=False, props=()):
    """An av01 item whose sequence header says ``width`` x ``height``, ``ispe`` ``declared`` (same by default)."""
    declared = declared or (width, height)
    properties = [(bmff.ispe(*declared), False), (bmff.box("av1C", b"\x81\x00\x0c\x00"), True), *props]
    return bmff.Item(item_id, "av01", av1_data(width, height), properties, hidden=hidden)


def avif(*items, primary=1) -> bytes:
    return bmff.write_heif(bmff.Heif(("avif", "mif1", "miaf"), primary, list(items)))


def plan(data: bytes, decoder: Decoder = LIBAVIF, max_pixels: int = 50_000_000):
    structure = read_structure(data)
    assert structure is not None
    return primary_image(structure, max_pixels, decoder)


def failure(data: bytes, decoder: Decoder = LIBAVIF, max_pixels: int = 50_000_000) -> PermanentFailure:
    with pytest.raises(PermanentFailure) as caught:
        plan(data, decoder, max_pixels)
    return caught.value


# --- AV1 sequence headers ---------------------------------------------------------------


def test_a_reduced_still_picture_header_gives_its_max_frame_size():
    assert av1_sequence_header_size(reduced_sequence_header(16384, 9000)) == (16384, 9000)


def test_a_full_sequence_header_is_read_through_timing_decoder_model_and_operating_points():
    bits = Bits().f(3, 0).f(1, 0).f(1, 0)  # profile, still_picture, reduced_still_picture_header
    bits.f(1, 1).f(32, 1001).f(32, 60000).f(1, 1).ue(4)  # timing_info with num_ticks_per_picture_minus_1
    bits.f(1, 1).f(5, 9).f(32, 90000).f(5, 20).f(5, 20)  # decoder_model_info: buffer_delay_length 10 bits
    bits.f(1, 1)  # initial_display_delay_present_flag
    bits.f(5, 1)  # two operating points
    bits.f(12, 0x103).f(5, 9).f(1, 1)  # seq_level_idx 9 > 7: seq_tier
    bits.f(1, 1).f(10, 300).f(10, 200).f(1, 0)  # decoder model for this point
    bits.f(1, 1).f(4, 3)  # initial_display_delay_minus_1
    bits.f(12, 0x101).f(5, 4)  # seq_level_idx 4: no tier bit
    bits.f(1, 0)  # no decoder model
    bits.f(1, 0)  # no initial display delay
    bits.f(4, 11).f(4, 10).f(12, 4031).f(11, 1999)  # 12 and 11 bits of frame size
    assert av1_sequence_header_size(bits.f(8, 0).bytes()) == (4032, 2000)


def test_a_cut_sequence_header_is_a_value_error():
    with pytest.raises(ValueError):
        av1_sequence_header_size(reduced_sequence_header(64, 64)[:3])


def test_frame_sizes_are_read_up_to_the_first_picture():
    later = obu(1, reduced_sequence_header(9999, 9999))
    assert av1_frame_sizes(av1_data(640, 480) + later) == [(640, 480)]
    assert av1_frame_sizes(obu(1, reduced_sequence_header(8, 8)) + obu(1, reduced_sequence_header(16, 8))) == [
        (8, 8),
        (16, 8),
    ]


# --- HEVC sequence parameter sets -------------------------------------------------------


def escape(rbsp: bytes) -> bytes:
    """Emulation prevention (H.265 7.4.2): 0x03 after two zero bytes before a byte <= 3."""
    out, zeros = bytearray(), 0
    for byte in rbsp:
        if zeros >= 2 and byte <= 3:
            out.append(3)
            zeros = 0
        out.append(byte)
        zeros = zeros + 1 if byte == 0 else 0
    return bytes(out)


def sps(width: int, height: int, window: tuple[int, int, int, int] | None, chroma: int = 1, sub_layers: int = 1):
    """An SPS NAL unit (type 33) with ``sub_layers`` temporal sub-layers, profile bits all zero."""
    bits = Bits().f(4, 0).f(3, sub_layers - 1).f(1, 1).f(96, 0x01 << 8 | 90)  # general PTL: zeros, level 90
    for _ in range(sub_layers - 1):
        bits.f(1, 1).f(1, 1)  # sub_layer_profile_present_flag, sub_layer_level_present_flag
    if sub_layers > 1:
        bits.f(2 * (8 - (sub_layers - 1)), 0)
    for _ in range(sub_layers - 1):
        bits.f(88, 0).f(8, 60)
    bits.ue(0).ue(chroma)
    if chroma == 3:
        bits.f(1, 0)
    bits.ue(width).ue(height).f(1, window is not None)
    for offset in window or ():
        bits.ue(offset)
    bits.ue(0).ue(0)  # what follows does not matter here
    return bytes([33 << 1, 1]) + escape(bits.bytes())


@pytest.mark.parametrize("sub_layers", [1, 3])
def test_an_sps_gives_its_coded_size_and_the_conformance_window(sub_layers):
    nal = sps(648, 488, (0, 4, 0, 4), sub_layers=sub_layers)
    assert b"\x00\x00\x03" in nal  # the zero profile bits needed emulation prevention
    assert hevc_sps_size(nal) == (648, 488, 640, 480)  # 4:2:0: offsets count 2 pixels


def test_an_sps_window_in_444_counts_single_pixels_and_a_window_larger_than_the_picture_is_refused():
    assert hevc_sps_size(sps(64, 64, (0, 3, 1, 0), chroma=3)) == (64, 64, 61, 63)
    with pytest.raises(ValueError):
        hevc_sps_size(sps(64, 64, (0, 40, 0, 0)))


# --- orientation and clean aperture -----------------------------------------------------


def _picture() -> Image.Image:
    image = Image.new("RGB", (3, 2))
    for i, xy in enumerate(((0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1))):
        image.putpixel(xy, (i * 40, 0, 0))
    return image


def _apply(image: Image.Image, steps) -> Image.Image:
    for step in steps:
        if isinstance(step, Rotation):
            image = image.rotate(90 * step.quarter_turns, expand=True)
        else:
            image = ImageOps.flip(image) if step.axis == 0 else ImageOps.mirror(image)
    return image


STEPS = [
    (),
    (Rotation(1),),
    (Rotation(2),),
    (Rotation(3),),
    (Mirror(0),),
    (Mirror(1),),
    (Rotation(1), Mirror(0)),
    (Rotation(1), Mirror(1)),
    (Rotation(3), Mirror(0)),
    (Rotation(2), Mirror(1)),
    (Mirror(1), Rotation(1)),  # not MIAF's order: composed as written
]


@pytest.mark.parametrize("steps", STEPS)
def test_the_exif_orientation_shows_what_the_rotations_and_mirrors_do(steps):
    wanted = _apply(_picture(), steps)
    tagged = _picture()
    exif = Image.Exif()
    exif[0x0112] = exif_orientation(steps)
    tagged.info["exif"] = exif.tobytes()
    shown = ImageOps.exif_transpose(tagged)
    assert (shown.size, shown.tobytes()) == (wanted.size, wanted.tobytes())


def test_irot_and_imir_map_to_exif_values_as_libavif_maps_them():
    assert [exif_orientation(s) for s in STEPS[:8]] == [1, 8, 3, 6, 4, 2, 5, 7]


def clap_payload(width, height, horiz: tuple[int, int], vert: tuple[int, int]) -> bytes:
    return bmff.box("clap", struct.pack(">IIIIiIiI", *width, *height, *horiz, *vert))[8:]


def test_a_whole_pixel_clean_aperture_is_kept_exactly():
    payload = bmff.clap_for(96, 64, 8, 4, 56, 40)[8:]
    assert clean_aperture(payload, 96, 64) == CleanAperture(8, 4, 56, 40)


def test_a_fractional_clean_aperture_is_rounded_and_clamped_as_libheif_does():
    # left = trunc(1/4 + 99/2 - 49/2) = 25, right = round(49 + 25) = 74; top = round(-3/2 + 29.5 - 14.5) = 14
    assert clean_aperture(clap_payload((50, 1), (30, 1), (1, 4), (-3, 2)), 100, 60) == CleanAperture(25, 14, 50, 30)
    # larger than the image: clamped to it
    assert clean_aperture(clap_payload((200, 1), (100, 1), (0, 1), (0, 1)), 100, 60) == CleanAperture(0, 0, 100, 60)


@pytest.mark.parametrize(
    "payload",
    [clap_payload((10, 1), (10, 1), (500, 1), (0, 1)), clap_payload((10, 0), (10, 1), (0, 1), (0, 1))],
    ids=["outside", "zero-denominator"],
)
def test_a_clean_aperture_with_nothing_left_is_corrupt(payload):
    with pytest.raises(PermanentFailure) as caught:
        clean_aperture(payload, 100, 60)
    assert caught.value.reason == "corrupt_image"


# --- the primary image ------------------------------------------------------------------


def test_a_coded_image_is_its_sequence_header_size_with_its_transforms_in_ipma_order():
    props = [(bmff.clap_for(640, 480, 0, 0, 600, 400), True), (bmff.irot(1), True), (bmff.imir(1), True)]
    found = plan(avif(av01(1, 640, 480, props=props)))
    assert (found.width_px, found.height_px, found.coded_items) == (640, 480, 1)
    assert found.transforms == (CleanAperture(0, 0, 600, 400), Rotation(1), Mirror(1))
    assert (found.display_width_px, found.display_height_px) == (400, 600)


@pytest.mark.parametrize(
    ("frame", "declared", "reason"),
    [
        ((8000, 8000), (8000, 8000), "too_many_pixels"),  # over max_pixels
        ((2000, 1500), (64, 64), "too_many_pixels"),  # decodes more than it declares
        ((64, 64), (2000, 1500), "corrupt_image"),  # declares more than its data holds
    ],
)
def test_a_coded_size_that_disagrees_or_is_too_large_is_refused(frame, declared, reason):
    assert failure(avif(av01(1, *frame, declared=declared))).reason == reason


def _grid(rows, columns, output, tiles, tile_size=(512, 512), declared=None, decoder_brands=("avif", "mif1")):
    items = [av01(2 + k, *tile_size, hidden=True) for k in range(tiles)]
    grid = bmff.Item(
        1,
        "grid",
        bmff.grid_descriptor(rows, columns, *output),
        [(bmff.ispe(*(declared or output)), False)],
        refs=[("dimg", [i.id for i in items])],
    )
    return bmff.write_heif(bmff.Heif(decoder_brands, 1, [grid, *items]))


def test_a_grid_is_its_output_size_and_each_tile_is_counted_once():
    found = plan(_grid(2, 3, (1500, 1000), 6))
    assert (found.width_px, found.height_px, found.coded_items) == (1500, 1000, 6)
    assert found.largest_picture_px == 1500 * 1000


def test_a_48_mp_phone_grid_is_not_refused_for_its_tiles_area():
    # 8064x6048 in 16x12 tiles of 512: the tiles cover 8192x6144 = 50.3 MP, the output 48.8 MP
    assert plan(_grid(12, 16, (8064, 6048), 192)).coded_items == 192


@pytest.mark.parametrize(
    ("grid", "reason", "detail"),
    [
        (dict(rows=8, columns=8, output=(32768, 32768), tiles=64, declared=(64, 64)), "too_many_pixels", "32768x32768"),
        (dict(rows=2, columns=2, output=(1024, 1024), tiles=3), "corrupt_image", "is 2x2 but has 3 tiles"),
        (dict(rows=2, columns=2, output=(1100, 1024), tiles=4), "corrupt_image", "do not cover"),
        (dict(rows=2, columns=2, output=(500, 1024), tiles=4), "corrupt_image", "a whole tile outside"),
        (dict(rows=2, columns=2, output=(1024, 1024), tiles=4, declared=(1000, 1000)), "too_many_pixels", "ispe"),
        (dict(rows=2, columns=2, output=(1000, 1000), tiles=4, declared=(1024, 1024)), "corrupt_image", "ispe"),
    ],
)
def test_a_grid_that_is_too_large_or_contradicts_itself_is_refused(grid, reason, detail):
    caught = failure(_grid(**grid))
    assert caught.reason == reason and detail in caught.detail


def test_tiles_of_different_sizes_are_corrupt():
    items = [av01(2, 512, 512, hidden=True), av01(3, 512, 400, hidden=True)]
    grid = bmff.Item(1, "grid", bmff.grid_descriptor(1, 2, 1000, 400), [(bmff.ispe(1000, 400), False)])
    grid.refs = [("dimg", [2, 3])]
    caught = failure(avif(grid, *items))
    assert caught.reason == "corrupt_image" and "different sizes" in caught.detail


def test_a_tile_over_the_pixel_limit_is_refused_even_in_a_small_grid():
    caught = failure(_grid(1, 1, (64, 64), 1, tile_size=(64, 64)), max_pixels=100)
    assert caught.reason == "too_many_pixels"


def test_a_grid_made_of_itself_is_corrupt():
    grid = bmff.Item(1, "grid", bmff.grid_descriptor(1, 1, 64, 64), [(bmff.ispe(64, 64), False)], refs=[("dimg", [1])])
    assert "derived from itself" in failure(avif(grid)).detail


def test_an_overlay_is_unsupported_by_libavif_and_checked_by_canvas_for_libheif():
    inputs = [av01(2, 64, 64, hidden=True), av01(3, 64, 64, hidden=True)]
    overlay = bmff.Item(
        1, "iovl", bmff.overlay_descriptor(9000, 9000, [(0, 0), (64, 64)]), [(bmff.ispe(9000, 9000), False)]
    )
    overlay.refs = [("dimg", [2, 3])]
    data = avif(overlay, *inputs)
    caught = failure(data)
    assert caught.reason == "unsupported_feature" and "overlay (iovl) of 2 images" in caught.detail
    with_av1 = Decoder("libheif", frozenset({"av01"}), frozenset({"iovl"}))
    assert failure(data, with_av1).reason == "too_many_pixels"
    assert plan(data, with_av1, max_pixels=100_000_000).coded_items == 2


def test_an_item_type_the_decoder_lacks_is_unsupported():
    caught = failure(avif(av01(1, 64, 64)), LIBHEIF)
    assert caught.reason == "unsupported_feature" and "'av01'" in caught.detail


def test_an_identity_image_takes_its_input_size_after_the_inputs_transforms():
    source = av01(2, 640, 480, hidden=True, props=[(bmff.irot(1), True)])
    iden = bmff.Item(1, "iden", b"", [(bmff.imir(0), True)], refs=[("dimg", [2])])
    with_av1 = Decoder("libheif", frozenset({"av01"}), frozenset({"iden"}))
    found = plan(avif(iden, source), with_av1)
    assert (found.width_px, found.height_px, found.transforms) == (480, 640, (Mirror(0),))


def test_the_alpha_plane_is_checked_with_the_primary():
    alpha = av01(2, 9000, 9000, hidden=True)
    alpha.properties.append((bmff.full_box("auxC", 0, 0, b"urn:mpeg:mpegB:cicp:systems:auxiliary:alpha\0"), True))
    alpha.refs = [("auxl", [1])]
    caught = failure(avif(av01(1, 64, 64), alpha))
    assert caught.reason == "too_many_pixels" and "item 2" in caught.detail


def test_no_primary_item_or_a_missing_one_is_corrupt():
    assert failure(avif(av01(1, 64, 64), primary=7)).reason == "corrupt_image"


def test_more_items_than_the_limit_are_corrupt(monkeypatch):
    monkeypatch.setattr(heif_items, "MAX_ITEMS", 3)
    with pytest.raises(PermanentFailure) as caught:
        read_structure(avif(*(av01(i, 8, 8) for i in range(1, 6))))
    assert caught.value.reason == "corrupt_image"


def test_extents_past_the_data_are_truncated():
    data = avif(av01(1, 64, 64))
    structure = read_structure(data)
    assert extent_problem(structure, len(data)) is None
    problem = extent_problem(structure, len(data) - 1)
    assert problem is not None and problem.reason == "truncated_image" and "item 1 (av01)" in problem.detail


def test_a_file_without_meta_has_no_structure():
    assert read_structure(bmff.box("ftyp", b"isom\0\0\0\0isom") + bmff.box("mdat", b"x")) is None


# --- overlays ---------------------------------------------------------------------------

#: libheif as the worker's DECODERS describe it, with AV1 so that the av01 items here decode.
LIBHEIF_AV1 = Decoder("libheif", frozenset({"av01"}), frozenset({"iovl", "grid"}), misplaces_negative_offsets=True)
RED_FILL = (0xFFFF, 0, 0, 0xFFFF)


def overlay(item_id, canvas, offsets, inputs, *, props=(), in_idat=False, **descriptor):
    """An iovl item of ``canvas`` placing ``inputs`` (item ids) at ``offsets``, with an ispe of the canvas."""
    data = bmff.overlay_descriptor(*canvas, offsets, **descriptor)
    properties = [(bmff.ispe(*canvas), False), *((p, True) for p in props)]
    return bmff.Item(item_id, "iovl", data, properties, refs=[("dimg", list(inputs))], in_idat=in_idat)


def test_an_overlay_says_its_canvas_fill_and_where_each_input_goes_as_placed():
    turned = av01(3, 640, 480, hidden=True, props=[(bmff.irot(1), True)])  # placed 480x640
    data = avif(overlay(1, (1000, 680), [(10, -20), (-5, 600)], [2, 3], fill_rgba=RED_FILL), av01(2, 64, 32), turned)
    found = plan(data, LIBHEIF_AV1)
    assert (found.width_px, found.height_px) == (1000, 680)
    assert found.overlay == Overlay(
        1, 1000, 680, RED_FILL, False, (Placement(2, 10, -20, 64, 32), Placement(3, -5, 600, 480, 640))
    )
    assert plan(avif(overlay(1, (70000, 10), [(-1, 0)], [2], wide=True), av01(2, 8, 8)), LIBHEIF_AV1).overlay.wide


def test_an_overlay_of_a_version_other_than_0_is_unsupported():
    item = overlay(1, (64, 64), [(0, 0)], [2], version=1)
    caught = failure(avif(item, av01(2, 64, 64)), LIBHEIF_AV1)
    assert caught.reason == "unsupported_feature" and "version 1" in caught.detail


def test_an_overlay_with_an_empty_canvas_is_corrupt():
    item = overlay(1, (0, 64), [(0, 0)], [2])
    item.properties = []  # no ispe either, which would say 0 first
    assert failure(avif(item, av01(2, 64, 64)), LIBHEIF_AV1).reason == "corrupt_image"


def test_an_overlay_whose_inputs_lie_on_its_canvas_or_past_its_right_and_bottom_is_decoded_as_it_is():
    data = avif(overlay(1, (100, 80), [(0, 0), (90, 70)], [2, 3]), av01(2, 64, 64), av01(3, 64, 64))
    assert plan(data, LIBHEIF_AV1).recomposition is None


def test_inputs_left_of_or_above_the_canvas_are_recomposed_on_a_grown_canvas():
    transforms = (bmff.clap_for(100, 80, 10, 0, 80, 80), bmff.irot(3), bmff.imir(1))
    item = overlay(1, (100, 80), [(-30, 5), (50, -12), (-500, -500)], [2, 3, 4], props=transforms, fill_rgba=RED_FILL)
    data = avif(item, av01(2, 64, 64), av01(3, 64, 64), av01(4, 64, 64))
    found = plan(data, LIBHEIF_AV1)
    moved = found.recomposition
    # grown by what shows of the inputs past the edges; the one wholly outside does not count
    assert (moved.left_px, moved.top_px, moved.width_px, moved.height_px) == (30, 12, 130, 92)
    assert found.transforms == (CleanAperture(10, 0, 80, 80), Rotation(3), Mirror(1))
    patched = moved.applied_to(data)
    changed = {at for at, (old, new) in enumerate(zip(data, patched, strict=True)) if old != new}
    assert changed and changed <= {at + k for at, new in moved.patches for k in range(len(new))}
    again = plan(patched, LIBHEIF_AV1)
    assert again.recomposition is None and again.transforms == ()  # detached: the caller applies them
    assert again.overlay == Overlay(
        1,
        130,
        92,
        RED_FILL,
        False,
        (Placement(2, 0, 17, 64, 64), Placement(3, 80, 0, 64, 64), Placement(4, -470, -488, 64, 64)),
    )
    assert (again.width_px, again.height_px) == (130, 92)  # its ispe says the grown canvas too
    # a decoder that places them right decodes the file as it is
    assert plan(data, Decoder("x", frozenset({"av01"}), frozenset({"iovl"}))).recomposition is None


def test_a_recomposed_descriptor_kept_in_idat_is_patched_there():
    item = overlay(1, (100, 80), [(-30, 5)], [2], in_idat=True, wide=True)
    data = avif(item, av01(2, 64, 64))
    moved = plan(data, LIBHEIF_AV1).recomposition
    again = plan(moved.applied_to(data), LIBHEIF_AV1)
    assert again.overlay.placements == (Placement(2, 0, 5, 64, 64),) and again.overlay.width_px == 130


def test_a_grown_canvas_over_the_pixel_limit_is_too_many_pixels():
    data = avif(overlay(1, (100, 100), [(-10, 0)], [2]), av01(2, 64, 64))
    assert plan(data, LIBHEIF_AV1, max_pixels=11_000).recomposition is not None
    caught = failure(data, LIBHEIF_AV1, max_pixels=10_500)
    assert caught.reason == "too_many_pixels" and "110x100" in caught.detail


def unsupported(data: bytes) -> str:
    caught = failure(data, LIBHEIF_AV1, max_pixels=100_000_000)
    assert caught.reason == "unsupported_feature", caught
    return caught.detail


def test_an_overlay_whose_grown_canvas_does_not_fit_its_16_bit_fields_is_unsupported():
    data = avif(overlay(1, (65_530, 10), [(-10, 0)], [2]), av01(2, 64, 64, hidden=True))
    assert "65540x10 does not fit its 16-bit fields" in unsupported(data)
    wide = avif(overlay(1, (65_530, 10), [(-10, 0)], [2], wide=True), av01(2, 64, 64, hidden=True))
    assert plan(wide, LIBHEIF_AV1).recomposition.width_px == 65_540


def test_an_overlay_whose_ispe_box_another_item_shares_is_unsupported_when_it_must_be_recomposed():
    # the input is as large as the canvas: writers that share equal property boxes (libheif) share its ispe
    data = avif(overlay(1, (64, 64), [(-10, 0)], [2]), av01(2, 64, 64, hidden=True))
    assert "ispe is shared" in unsupported(data)


def test_an_overlay_with_an_alpha_plane_is_unsupported_when_it_must_be_recomposed():
    alpha = av01(3, 100, 80, hidden=True)
    alpha.properties.append((bmff.full_box("auxC", 0, 0, b"urn:mpeg:mpegB:cicp:systems:auxiliary:alpha\0"), True))
    alpha.refs = [("auxl", [1])]
    data = avif(overlay(1, (100, 80), [(-10, 0)], [2]), av01(2, 64, 64, hidden=True), alpha)
    assert "alpha plane" in unsupported(data)


def test_an_overlay_with_inputs_outside_it_inside_another_derived_image_is_unsupported():
    grid = bmff.Item(
        9, "grid", bmff.grid_descriptor(1, 1, 100, 80), [(bmff.ispe(100, 80), False)], refs=[("dimg", [1])]
    )
    items = [grid, overlay(1, (100, 80), [(-10, 0)], [2]), av01(2, 64, 64, hidden=True)]
    data = bmff.write_heif(bmff.Heif(("avif", "mif1", "miaf"), 9, items))
    assert "is not the primary image" in unsupported(data)
