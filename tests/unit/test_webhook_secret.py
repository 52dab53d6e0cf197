"""A webhook secret is checked where it is given, and a bad one is refused with its right
form (Standard Webhooks: base64 of 24 to 64 random bytes, ``whsec_`` in front locally; the
Secrets Manager value of a deployed stack is the base64 alone)."""

from __future__ import annotations

import base64

import pytest

from mediajobs.adapters.webhooks import StandardWebhooksSigner
from mediajobs.domain.notifications import webhook_key
from mediajobs.local.notifications import new_webhook_secret

KEY = bytes(range(32))
LOCAL = "whsec_" + base64.b64encode(KEY).decode()
DEPLOYED = "abcdefghijklmnopqrstuvwxyz012345"  # what the template's GenerateSecretString makes: 24 bytes


def test_each_form_gives_its_key():
    assert webhook_key(LOCAL, prefixed=True) == webhook_key(LOCAL) == KEY
    assert len(webhook_key(DEPLOYED, prefixed=False)) == 24 and webhook_key(DEPLOYED) == webhook_key(
        DEPLOYED, prefixed=False
    )
    assert len(webhook_key(new_webhook_secret(), prefixed=True)) == 32


@pytest.mark.parametrize(
    ("secret", "prefixed", "says"),
    [
        ("mysecret", True, "starts with whsec_"),
        ("whsec_mysecret", True, "holds 6 bytes"),
        ("whsec_not base64!", True, "not base64"),
        ("whsec_" + base64.b64encode(bytes(65)).decode(), True, "holds 65 bytes"),
        (LOCAL, False, "the base64 alone"),
        ("", None, "holds 0 bytes"),
    ],
)
def test_a_bad_secret_is_refused_naming_the_right_form(secret, prefixed, says):
    with pytest.raises(ValueError, match="whsec_") as refused:
        webhook_key(secret, prefixed=prefixed)
    message = str(refused.value)
    assert says in message and "24 to 64" in message and "Secrets Manager" in message


def test_the_signer_refuses_a_bad_secret_when_it_first_reads_it():
    with pytest.raises(ValueError, match="holds 6 bytes"):
        StandardWebhooksSigner(lambda: "whsec_mysecret")


def test_a_secret_with_a_trailing_newline_signs_as_without_it():
    """A Secrets Manager value written from a file (``--secret-string file://s.txt``) may end
    in a newline: the library's decoder skipped it before this check existed, so must the check."""
    assert webhook_key(DEPLOYED + "\n") == webhook_key(DEPLOYED)
    with_newline = StandardWebhooksSigner(lambda: DEPLOYED + "\n").signature("m", 1_700_000_000, "{}")
    assert with_newline == StandardWebhooksSigner("whsec_" + DEPLOYED).signature("m", 1_700_000_000, "{}")


def test_a_deployed_secret_that_is_not_base64_says_so_without_naming_the_prefix():
    with pytest.raises(ValueError, match="not base64;"):
        webhook_key("not base64 at all!", prefixed=False)
