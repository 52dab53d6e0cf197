"""The synthetic cases' registry (tests/media/cases_*.py): each case names its files, its
expected outcome and the public report it stands for, with a stable reason code."""

from __future__ import annotations

from mediajobs.domain.errors import REASON_CODES
from tests.conftest import case_registry


def test_every_case_names_distinct_files_an_outcome_and_its_source():
    cases = case_registry()
    names = [name for case in cases for name in case.files]
    assert len(names) == len(set(names))
    for case in cases:
        assert case.files and case.expected and case.source, case.id
        assert case.reason is None or case.reason in REASON_CODES, case.id
        assert all(name.startswith(f"{case.id}_") for name in case.files), case.id


def test_the_cases_are_the_kinds_the_tests_rely_on():
    ids = {case.id for case in case_registry()}
    assert ids == {
        "I01", "I02", "I03", "I05", "I07", "I08", "I10", "I12", "I14", "I16", "I17", "I18",
        "V01", "V02", "V04", "V05", "V06", "V08", "V09", "V10",
        "B01", "B02", "B03", "B04", "B05", "B06", "B07", "B08", "B09", "B10", "B11", "B12", "B13", "B14",
        "B15", "B16",
        "R01", "R02", "R03",
    }  # fmt: skip
    made_with_ffmpeg = {i for i in ids if i.startswith("V")} | {"B11", "B13"}
    assert {case.id for case in case_registry() if case.needs_ffmpeg} == made_with_ffmpeg
