"""layers/checkov_gate.py: the security scan's verdict from checkov's JSON report, and the
skips of template.yaml, each with its reason, each listed in docs/deploy.md."""

from __future__ import annotations

import json
import re

import pytest

from mediajobs.local.template import load_template
from tests.conftest import REPO, load_script

gate = load_script("layers_checkov_gate", REPO / "layers" / "checkov_gate.py")


def report(passed: int = 3, failed: list | None = None, skipped: list | None = None, parsing_errors: int = 0) -> dict:
    failed, skipped = failed or [], skipped or []
    return {
        "check_type": "cloudformation",
        "results": {"passed_checks": [], "failed_checks": failed, "skipped_checks": skipped, "parsing_errors": []},
        "summary": {"passed": passed, "failed": len(failed), "skipped": len(skipped), "parsing_errors": parsing_errors},
    }


def skip(comment: str | None) -> dict:
    return {"check_id": "CKV_AWS_1", "resource": "AWS::SQS::Queue.Q", "check_result": {"suppress_comment": comment}}


def test_a_clean_scan_with_explained_skips_passes(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report(skipped=[skip("does not apply: why")])))
    assert gate.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "skipped CKV_AWS_1 AWS::SQS::Queue.Q: does not apply: why" in out
    assert out.splitlines()[-1] == "checkov: passed 3, failed 0, skipped 1, parsing errors 0"


@pytest.mark.parametrize(
    "scan",
    [
        report(failed=[{"check_id": "CKV_AWS_2", "resource": "AWS::S3::Bucket.B", "file_line_range": [1, 2]}]),
        report(skipped=[skip("")]),
        report(skipped=[skip("  ")]),
        report(skipped=[skip(None)]),
        report(skipped=[skip("No comment provided")]),  # what checkov 3.3 writes for a skip without one
        report(passed=0, parsing_errors=1),  # checkov itself exits 0 here
        report(passed=0),
        [],
    ],
    ids=[
        "failed",
        "empty-reason",
        "blank-reason",
        "no-reason",
        "checkovs-no-comment",
        "not-parsed",
        "nothing-scanned",
        "no-report",
    ],
)
def test_a_failure_an_unparsed_template_or_an_unexplained_skip_fails(scan, tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(scan))
    assert gate.main([str(path)]) == 1


def test_an_empty_report_fails(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("")
    assert gate.main([str(path)]) == 1


def _skips() -> list[tuple[str, str, str]]:
    """(resource, check id, reason) of every checkov skip in template.yaml."""
    resources = load_template(REPO / "template.yaml")["Resources"]
    return [
        (name, entry.get("id", ""), str(entry.get("comment") or ""))
        for name, resource in resources.items()
        for entry in (resource.get("Metadata", {}).get("checkov", {}).get("skip") or [])
    ]


def test_every_skip_in_the_template_names_a_check_and_gives_its_reason():
    skips = _skips()
    assert skips, "template.yaml skips no check: then the Security scan section lists none either"
    for name, check, reason in skips:
        assert re.fullmatch(r"CKV2?_AWS_\d+", check), (name, check)
        assert len(reason.split()) >= 5, f"{name} {check}: a skip needs its reason"


def test_the_deploy_page_lists_exactly_the_skipped_checks():
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text.split("## Security scan", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(CKV2?_AWS_\d+)`", section))
    assert listed == {check for _, check, _ in _skips()}
