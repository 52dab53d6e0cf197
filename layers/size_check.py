"""Lambda's unzipped size limit, checked on ``sam build`` output.

    python3 layers/size_check.py .aws-sam/build [.aws-sam/build-x86_64 ...]

Each build folder holds one artifact folder per function and layer (``WorkerFunction``,
``MediaJobsLayer``, ``FfmpegLayer``). Lambda counts a function's unzipped code and all of its
layers together against one limit (AWS Lambda quotas: "250 MB" unzipped, i.e. 262,144,000
bytes, for the deployment package including layers). The one function here uses both layers,
so the sum of every artifact is what it counts (with more functions the sum would over-count,
on the safe side). Sizes are apparent sizes (``st_size``) of the files, as unzipped; folders
count nothing.

Prints each part's bytes and the total, and exits 1 when a total passes ``--max-fraction`` of
the limit (80 % by default: 209,715,200 bytes, which is 200 MiB), so growth is caught before
a deploy fails.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024

#: Lambda's limit on a function's unzipped code plus all its layers, bytes (AWS Lambda
#: quotas, "Deployment package (.zip file archive) size": 250 MB unzipped = 250 MiB).
LAMBDA_UNZIPPED_LIMIT_BYTES = 250 * MIB

#: The share of the limit CI lets a build use.
MAX_FRACTION = 0.8


def tree_bytes(root: Path) -> int:
    """Apparent size of every file under ``root``, bytes (symbolic links to files count as
    the file they name, as a zip made by following them stores it; folders count 0)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            if path.is_file():
                total += path.stat().st_size
    return total


@dataclass(frozen=True)
class Report:
    """One build's sizes: ``parts`` (artifact name -> bytes), their total, and the cap."""

    build: str
    parts: dict[str, int]
    limit_bytes: int
    max_fraction: float

    @property
    def total_bytes(self) -> int:
        """Sum of the parts, bytes."""
        return sum(self.parts.values())

    @property
    def cap_bytes(self) -> int:
        """The most a build may take: ``max_fraction`` of the limit, bytes (rounded down)."""
        return int(self.limit_bytes * self.max_fraction)

    @property
    def ok(self) -> bool:
        """Whether the total is at most the cap (the cap itself passes)."""
        return self.total_bytes <= self.cap_bytes

    def lines(self) -> list[str]:
        """The report as text: one line per part, then the total against the limit."""
        out = [f"{self.build}:"]
        for name, size in sorted(self.parts.items()):
            out.append(f"  {name:<24} {size:>13,} B {size / MIB:9.1f} MiB")
        verdict = "ok" if self.ok else "OVER"
        out.append(
            f"  {'total':<24} {self.total_bytes:>13,} B {self.total_bytes / MIB:9.1f} MiB"
            f" = {self.total_bytes / self.limit_bytes:.1%} of {self.limit_bytes:,} B"
            f" (cap {self.max_fraction:.0%}: {self.cap_bytes:,} B) {verdict}"
        )
        return out


def measure(
    build: Path, *, limit_bytes: int = LAMBDA_UNZIPPED_LIMIT_BYTES, max_fraction: float = MAX_FRACTION
) -> Report:
    """Measure each artifact folder of the ``sam build`` folder ``build``.

    Raises
    ------
    FileNotFoundError
        When ``build`` holds no artifact folder (nothing was built there).
    """
    parts = {child.name: tree_bytes(child) for child in sorted(build.iterdir()) if child.is_dir()}
    if not parts:
        raise FileNotFoundError(f"{build} holds no built function or layer")
    return Report(str(build), parts, limit_bytes, max_fraction)


def main(argv: list[str] | None = None) -> int:
    """``size_check.py BUILD...``: 0 when every build fits, 1 when one is over its cap."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="+", type=Path, help="sam build folders (e.g. .aws-sam/build)")
    parser.add_argument("--limit-bytes", type=int, default=LAMBDA_UNZIPPED_LIMIT_BYTES)
    parser.add_argument("--max-fraction", type=float, default=MAX_FRACTION)
    args = parser.parse_args(argv)
    reports = [measure(b, limit_bytes=args.limit_bytes, max_fraction=args.max_fraction) for b in args.builds]
    for report in reports:
        print("\n".join(report.lines()))
    over = [r.build for r in reports if not r.ok]
    if over:
        share = f"{args.max_fraction:.0%}"
        print(f"size check: over {share} of Lambda's unzipped limit: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
