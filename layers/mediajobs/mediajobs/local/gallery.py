"""A static HTML gallery: each original beside its variants, with their sizes; a video is
shown by its poster frame, with a link to each rendition."""

from __future__ import annotations

import html
import os
from dataclasses import dataclass, field
from pathlib import Path


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


def _kb(size: int) -> str:
    return f"{size / 1024:.1f} KB"


def write_gallery(out_dir: Path, entries: list[GalleryEntry], title: str = "mediajobs demo") -> Path:
    """Write ``out_dir/index.html`` with links relative to ``out_dir``; returns its path."""

    def rel(path: Path) -> str:
        return html.escape(os.path.relpath(path, out_dir).replace(os.sep, "/"))

    rows = []
    for entry in entries:
        cells = []
        if entry.original is not None:
            cells.append(
                f'<figure><img src="{rel(entry.original)}" alt="original"><figcaption>original<br>'
                f"{_kb(entry.original.stat().st_size)}</figcaption></figure>"
            )
        for v in sorted(entry.variants, key=lambda v: v.path.suffix == ".mp4"):  # the poster first
            if v.path.suffix == ".mp4":
                cells.append(
                    f'<figure class=rendition><a href="{rel(v.path)}">&#9654; {html.escape(v.name)}</a>'
                    f"<figcaption>{v.width}&times;{v.height} &middot; mp4 &middot; {_kb(v.bytes)}</figcaption></figure>"
                )
                continue
            cells.append(
                f'<figure><a href="{rel(v.path)}"><img src="{rel(v.path)}" alt="{html.escape(v.name)}"></a>'
                f"<figcaption>{html.escape(v.name)} &middot; {v.width}&times;{v.height}<br>"
                f"{html.escape(v.path.suffix[1:])} &middot; {_kb(v.bytes)}</figcaption></figure>"
            )
        if entry.failure:
            cells.append(f'<p class="failure">{html.escape(entry.failure)}</p>')
        key = f"<code>{html.escape(entry.job_key[:12])}</code>" if entry.job_key else ""
        rows.append(
            f"<section><h2>{html.escape(entry.title)} {key}</h2><div class=row>{''.join(cells)}</div></section>"
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
</style></head><body><h1>{html.escape(title)}</h1>
{"".join(rows)}
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
