"""The embedded AWS's answer to a CORS preflight: S3's evaluation of a bucket's CORS rules
(S3 user guide, "How does Amazon S3 evaluate the CORS configuration on a bucket?")."""

from __future__ import annotations

from mediajobs.local.cors import Rule, allowing_rule, bucket_of, preflight_answer

PAGE = "http://127.0.0.1:5001"
RULES = [
    Rule(("http://app.example",), ("GET",)),
    Rule((PAGE, "http://*.example.org"), ("PUT", "POST"), ("content-type", "x-amz-*"), ("ETag",), 3000),
]


def test_the_first_rule_matching_origin_method_and_every_header_allows():
    assert allowing_rule(RULES, PAGE, "PUT", ["content-type", "x-amz-checksum-sha256"]) is RULES[1]
    assert allowing_rule(RULES, "http://a.example.org", "POST", []) is RULES[1]
    assert allowing_rule(RULES, "http://app.example", "GET", []) is RULES[0]
    assert allowing_rule(RULES, "http://evil.example", "PUT", []) is None  # another origin
    assert allowing_rule(RULES, PAGE, "DELETE", []) is None  # another method
    assert allowing_rule(RULES, PAGE, "PUT", ["authorization"]) is None  # a header no rule allows
    assert allowing_rule(RULES, "http://127.0.0.1:5001.evil", "PUT", []) is None


def test_an_allowed_preflight_is_answered_with_the_rules_headers_and_another_with_403():
    status, headers, body = preflight_answer(RULES, PAGE, "PUT", "Content-Type, x-amz-checksum-sha256")
    answered = dict(headers)
    assert (status, body) == (200, b"")
    assert answered["Access-Control-Allow-Origin"] == PAGE and answered["Access-Control-Allow-Methods"] == "PUT, POST"
    assert answered["Access-Control-Allow-Headers"] == "content-type, x-amz-checksum-sha256"
    assert (answered["Access-Control-Expose-Headers"], answered["Access-Control-Max-Age"]) == ("ETag", "3000")
    status, headers, body = preflight_answer(RULES, "http://evil.example", "PUT", "")
    assert (
        status == 403 and b"<Code>AccessForbidden</Code>" in body and "Access-Control-Allow-Origin" not in dict(headers)
    )
    assert preflight_answer(None, PAGE, "PUT", "")[0] == 403  # no such bucket


def test_only_a_bucket_name_is_a_preflights_target():
    assert bucket_of("/mediajobs-local-media/originals/a.jpg") == "mediajobs-local-media"
    assert bucket_of("//mediajobs-local-media/x") == "mediajobs-local-media"
    for path in ("/moto-api/data.json", "//moto-api/reset", "/", "/latest/meta-data", "/X/y", "/a"):
        assert bucket_of(path) in (None, "latest"), path
