"""A static HTML gallery: each original beside its variants, with their sizes; a video is
shown by its poster frame, with a link to each rendition.

Where the original has a placeholder (the ``decisions`` of an ``image-placeholder`` or
``video-placeholder`` manifest, :func:`placeholder_from_manifest`), every picture of its row
is drawn on it until it loads: the ThumbHash decoded here (thash's decoder, at 32 px on the
long side) to a PNG data URL, stretched over the box, on the dominant colour, in a box of the
display size's aspect ratio; and a first cell shows the placeholder alone.

Where the entry has its asset's status (:func:`mediajobs.domain.assets.status_document`,
what ``GET /assets?key=...`` answers), a badge beside its title says the state: ready,
processing (with the progress of a job that reports one), failed (with the reason code) or
deleted (:func:`status_badge`).
"""

from __future__ import annotations

import base64
import binascii
import html
import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from PIL import Image
from thash import thumb_hash_to_rgba

from mediajobs.domain.recipes import fit_within

#: Longest side of the decoded ThumbHash, pixels (the reference decoder's own size).
PLACEHOLDER_PX = 32
#: Longest side a picture is shown at on the page, pixels (the stylesheet's max-width/height).
BOX_PX = 320
_COLOUR = re.compile(r"^#[0-9a-f]{6}$")


@dataclass(frozen=True)
class GalleryPlaceholder:
    """An original's placeholder, as its manifest's decisions give it.

    Attributes
    ----------
    data_url: the ThumbHash decoded to a ``data:image/png;base64,...`` URL.
    dominant_colour: ``#rrggbb``.
    width, height: the display size, pixels.
    """

    data_url: str
    dominant_colour: str
    width: int
    height: int

    def style(self, width: int, height: int) -> str:
        """The inline CSS that draws it under a picture of ``width`` x ``height`` pixels: the
        data URL stretched over the box on the dominant colour, the box as wide as the
        picture will be shown (at most :data:`BOX_PX`) and of the display size's aspect
        ratio, so the page keeps its layout while the picture loads."""
        shown_width, _ = fit_within(width, height, BOX_PX)
        return (
            f"background: {self.dominant_colour} url({self.data_url}) center / 100% 100% no-repeat; "
            f"width: {shown_width}px; aspect-ratio: {self.width} / {self.height}"
        )


def placeholder_from_manifest(manifest: Mapping[str, Any]) -> GalleryPlaceholder | None:
    """The placeholder in a manifest's ``decisions`` (``"placeholder": "thumbhash"``), or
    ``None`` for a manifest of another recipe or with values that do not read (the page
    then shows the picture without one)."""
    decisions = manifest.get("decisions")
    if not isinstance(decisions, Mapping) or decisions.get("placeholder") != "thumbhash":
        return None
    colour, width, height = (decisions.get(k) for k in ("dominant_colour", "display_width_px", "display_height_px"))
    if not (
        isinstance(colour, str) and _COLOUR.fullmatch(colour) and isinstance(width, int) and isinstance(height, int)
    ):
        return None
    try:
        hashed = base64.b64decode(str(decisions.get("thumbhash", "")), validate=True)
        w, h, rgba = thumb_hash_to_rgba(list(hashed), base_size=PLACEHOLDER_PX)
    except (binascii.Error, ValueError, IndexError):
        return None
    png = io.BytesIO()
    Image.frombytes("RGBA", (w, h), rgba).save(png, format="PNG")
    data_url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode("ascii")
    return GalleryPlaceholder(data_url, colour, width, height)


@dataclass
class GalleryVariant:
    """One derivative file: name, path, pixel size and bytes."""

    name: str
    path: Path
    width: int
    height: int
    bytes: int


@dataclass
class GalleryEntry:
    """One original and its variants (or the reason it failed)."""

    title: str
    original: Path | None
    job_key: str | None
    variants: list[GalleryVariant] = field(default_factory=list)
    failure: str | None = None
    placeholder: GalleryPlaceholder | None = None
    #: The asset's status document, when known (:func:`status_badge` draws it).
    status: Mapping[str, Any] | None = None


#: What the page says of an asset whose original was deleted: its pictures are the copies
#: fetched into this folder before, not what the bucket serves.
DELETED_NOTE: Final = (
    "Deleted: this original was deleted after it was rendered, and its derivatives no longer "
    "served (collected once no asset used them). Below, dimmed: the copies fetched into this "
    "folder before the delete."
)
#: The badges' meaning, above the rows.
LEGEND: Final = (
    "Each badge is the asset's state as the status route answers it now: ready (its derivatives "
    "are served), processing or pending, review (held by the moderation policy until a person decides), "
    "failed (with the reason code; its detail on hover), rejected (refused by the moderation policy: "
    "nothing rendered; the rule on hover), deleted (the original is gone; its pictures here are local copies)."
)

#: States a badge has a colour for (``docs/assets.md``); any other is drawn plain.
BADGE_STATES = ("pending", "processing", "review", "ready", "failed", "rejected", "deleted")


def status_badge(document: Mapping[str, Any] | None) -> str:
    """The HTML badge of an asset's status document: ``<span class="badge ready">ready</span>``;
    ``processing`` with the largest progress any job reports (``processing 40%``), ``failed``
    with the reason code (``failed: too_many_pixels``, the detail in its title); ``""`` for
    no document."""
    if not document:
        return ""
    state = str(document.get("state", ""))
    text, title = state, ""
    if state == "processing":
        progress = [j["progress"] for j in (document.get("recipes") or {}).values() if j.get("progress") is not None]
        if progress:
            text += f" {max(progress):.0%}"
    if state == "failed" and document.get("reason"):
        text += f": {document['reason']}"
        title = str(document.get("detail") or "")
    if state in ("rejected", "review"):
        title = str(document.get("detail") or "")
    css = state if state in BADGE_STATES else "other"
    shown_title = f' title="{html.escape(title)}"' if title else ""
    return f'<span class="badge {css}"{shown_title}>{html.escape(text)}</span>'


def _under(placeholder: GalleryPlaceholder | None, width: int, height: int) -> str:
    """`` style="..."`` drawing ``placeholder`` under a picture of ``width`` x ``height``, or ``""``."""
    return f' style="{html.escape(placeholder.style(width, height))}"' if placeholder else ""


def _kb(size: int) -> str:
    return f"{size / 1024:.1f} KB"


def write_gallery(out_dir: Path, entries: list[GalleryEntry], title: str = "mediajobs demo") -> Path:
    """Write ``out_dir/index.html`` with links relative to ``out_dir``; returns its path."""

    def rel(path: Path) -> str:
        return html.escape(os.path.relpath(path, out_dir).replace(os.sep, "/"))

    rows = []
    for entry in entries:
        cells = []
        placeholder = entry.placeholder
        if placeholder is not None:
            cells.append(
                f"<figure><div{_under(placeholder, placeholder.width, placeholder.height)}></div>"
                f"<figcaption>placeholder<br>thumbhash &middot; {html.escape(placeholder.dominant_colour)}"
                "</figcaption></figure>"
            )
        if entry.original is not None:
            shown = _under(placeholder, placeholder.width, placeholder.height) if placeholder else ""
            cells.append(
                f'<figure><img src="{rel(entry.original)}" alt="original" loading="lazy"{shown}>'
                f"<figcaption>original<br>{_kb(entry.original.stat().st_size)}</figcaption></figure>"
            )
        for v in sorted(entry.variants, key=lambda v: v.path.suffix == ".mp4"):  # the poster first
            if v.path.suffix == ".mp4":
                cells.append(
                    f'<figure class=rendition><a href="{rel(v.path)}">&#9654; {html.escape(v.name)}</a>'
                    f"<figcaption>{v.width}&times;{v.height} &middot; mp4 &middot; {_kb(v.bytes)}</figcaption></figure>"
                )
                continue
            cells.append(
                f'<figure><a href="{rel(v.path)}"><img src="{rel(v.path)}" alt="{html.escape(v.name)}" '
                f'loading="lazy"{_under(placeholder, v.width, v.height)}></a>'
                f"<figcaption>{html.escape(v.name)} &middot; {v.width}&times;{v.height}<br>"
                f"{html.escape(v.path.suffix[1:])} &middot; {_kb(v.bytes)}</figcaption></figure>"
            )
        if entry.failure:
            cells.append(f'<p class="failure">{html.escape(entry.failure)}</p>')
        key = f"<code>{html.escape(entry.job_key[:12])}</code>" if entry.job_key else ""
        gone = bool(entry.status) and str((entry.status or {}).get("state")) == "deleted"
        note = f'<p class="note">{html.escape(DELETED_NOTE)}</p>' if gone else ""
        rows.append(
            f"<section{' class=deleted' if gone else ''}><h2>{html.escape(entry.title)} {key} "
            f"{status_badge(entry.status)}</h2>{note}<div class=row>{''.join(cells)}</div></section>"
        )
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; background: #fafafa; }}
.row {{ display: flex; gap: 1rem; align-items: flex-end; flex-wrap: wrap; }}
figure {{ margin: 0; text-align: center; }}
img {{ max-width: 320px; max-height: 320px;
       background: repeating-conic-gradient(#ddd 0 25%, #fff 0 50%) 0 0/16px 16px; }}
figcaption {{ font-size: .85rem; color: #444; }}
.rendition a {{ display: block; padding: 1rem 1.5rem; background: #222; color: #fff; text-decoration: none; }}
.failure {{ color: #a00; }}
.badge {{ font-size: .8rem; font-weight: normal; padding: .1rem .5rem; border-radius: .6rem;
          color: #fff; background: #666; vertical-align: middle; }}
.badge.ready {{ background: #2a7a2a; }} .badge.processing, .badge.pending {{ background: #a87000; }}
.badge.failed, .badge.rejected {{ background: #a00; }} .badge.review {{ background: #6a3d9a; }}
.badge.deleted {{ background: #555; text-decoration: line-through; }}
.deleted .row {{ opacity: .4; }} .note {{ color: #555; margin: 0 0 .5rem; }}
</style></head><body><h1>{html.escape(title)}</h1>
<p class="note">{html.escape(LEGEND)}</p>
{"".join(rows)}
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
