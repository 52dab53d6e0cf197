"""The security scan's verdict, read from checkov's JSON report (``make checkov``).

    checkov --file template.yaml --framework cloudformation --output json > report.json
    python3 layers/checkov_gate.py report.json

checkov exits 1 on a failed check, but 0 when it could not parse the template (it then
scanned nothing), and it honours a skip whatever its comment. This prints each failed and
each skipped check (with its reason), then one summary line, and exits 1 when any check
failed, the template did not parse, nothing was scanned, or a skip has no reason: a check
that does not apply is skipped in ``template.yaml`` (``Metadata: checkov: skip:``) with its
reason as ``comment``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: The text checkov 3.3 puts in ``suppress_comment`` for a skip with no ``comment``
#: (``checkov/cloudformation/context_parser.py``): no reason, for this gate.
CHECKOV_NO_COMMENT = "No comment provided"


def problems(report: Any) -> tuple[list[str], list[str]]:
    """What fails the scan, and the lines to print (failures, skips, the summary).

    ``report`` is checkov's JSON output: one framework's object, or a list of them.
    """
    reports = report if isinstance(report, list) else [report]
    found: list[str] = []
    lines: list[str] = []
    totals = {"passed": 0, "failed": 0, "skipped": 0, "parsing_errors": 0}
    for one in reports:
        summary = one.get("summary", {})
        for key in totals:
            totals[key] += int(summary.get(key, 0))
        results = one.get("results", {})
        for check in results.get("failed_checks", []):
            where = f"{check['check_id']} {check['resource']} (lines {check.get('file_line_range')})"
            lines.append(f"FAILED  {where}: {check.get('check_name', '')}")
            found.append(f"failed: {where}")
        for check in results.get("skipped_checks", []):
            reason = (check.get("check_result", {}).get("suppress_comment") or "").strip()
            if reason == CHECKOV_NO_COMMENT:  # what checkov writes for a skip without a comment
                reason = ""
            lines.append(f"skipped {check['check_id']} {check['resource']}: {reason or '(no reason)'}")
            if not reason:
                found.append(f"skipped without a reason: {check['check_id']} {check['resource']}")
        for path in results.get("parsing_errors", []):
            found.append(f"not parsed: {path}")
    if totals["parsing_errors"]:
        found.append(f"{totals['parsing_errors']} file(s) checkov could not parse")
    if totals["passed"] + totals["failed"] + totals["skipped"] == 0:
        found.append("checkov ran no check")
    lines.append(
        "checkov: passed {passed}, failed {failed}, skipped {skipped}, parsing errors {parsing_errors}".format(**totals)
    )
    return found, lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="checkov's JSON report")
    args = parser.parse_args(argv)
    text = args.report.read_text(encoding="utf-8").strip()
    if not text:
        print("checkov wrote no report", file=sys.stderr)
        return 1
    found, lines = problems(json.loads(text))
    print("\n".join(lines))
    for problem in found:
        print(f"checkov gate: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
