"""foundry.data.pii: each detector on what it must replace and what it must leave alone (code above all)."""

from __future__ import annotations

import json
import random

import pytest

from foundry.config import PII_KINDS, DataConfig
from foundry.contracts import SourceFile
from foundry.data import audit as audits
from foundry.data import pii
from foundry.data.clean import PartitionJob, clean_partition, select_documents

# Test data only: documentation-style values, a Luhn-valid test card, AWS's documented example key.
CARD = "4111 1111 1111 1111"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
KEY_BLOCK = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\nabc+/=\n-----END RSA PRIVATE KEY-----"


def kinds(text: str) -> list[str]:
    return sorted(span.kind for span in pii.find(text))


@pytest.mark.parametrize(
    "text, kind",
    [
        ("mail jane.doe+tag@example.co.uk today", "email"),
        ("Author: Sam <sam@nightmare.com>", "email"),
        ("call +44 20 7946 0958 now", "phone"),
        ("call (555) 123-4567 now", "phone"),
        ("call 555-123-4567 now", "phone"),
        ("call 555.123.4567 now", "phone"),
        ("from 8.8.4.4 and", "ipv4"),
        ("server 2001:4860:4860::8888 here", "ipv6"),
        (f"card {CARD}.", "credit_card"),
        ("card 4111-1111-1111-1111 ok", "credit_card"),
        ("amex 378282246310005 ok", "credit_card"),
        (f"key = '{AWS_KEY}'", "aws_access_key"),
        (f"aws_secret_access_key = {AWS_SECRET}\n", "aws_secret_key"),
        (f"x\n{KEY_BLOCK}\ny", "private_key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", "private_key"),  # cut off: still a key
    ],
)
def test_detects(text, kind):
    assert kinds(text) == [kind]


@pytest.mark.parametrize(
    "text",
    [
        "@property\ndef name(self):",  # decorators
        "matrix = a @ b.T",  # matrix product
        "user@localhost",  # no top-level domain
        "xs[1::2], ys[::-1], d[a:b:c]",  # slices are not IPv6
        "at 12:30:45 on 2023-01-15",  # times and dates
        "version 3.11.2 and 1.2.3",  # three-part versions
        "listen on 127.0.0.1 and 10.0.0.8",  # loopback and private addresses identify no one
        "doc range 192.0.2.1 and fe80::1:2:3",  # documentation and link-local
        "n = 1234567890123456",  # fails the Luhn check
        "big = 4111111111111111111111",  # too many digits for a card
        "hash 0x7fffffff and 123456789",  # bare digit runs are not phones
        "x = 10 ** 9 + 7; y = 1e-6",
        "AKIA is a prefix, AKIAshort too",  # too short for an access key
        "my_secret_key = 'not forty characters'",
        "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
    ],
)
def test_leaves_alone(text):
    assert kinds(text) == []


def test_luhn():
    assert pii.luhn_ok("4111111111111111")
    assert pii.luhn_ok("378282246310005")
    assert not pii.luhn_ok("4111111111111112")


def test_scrub_replaces_with_typed_placeholders_and_counts():
    text = f"a@b.com, c@d.org; {CARD}; 8.8.8.8; {AWS_KEY}\n{KEY_BLOCK}\n"
    scrubbed, counts = pii.scrub(text)
    assert scrubbed == "<EMAIL>, <EMAIL>; <CREDIT_CARD>; <IPV4>; <AWS_ACCESS_KEY>\n<PRIVATE_KEY>\n"
    assert counts == {"email": 2, "credit_card": 1, "ipv4": 1, "aws_access_key": 1, "private_key": 1}


def test_scrub_only_the_configured_kinds():
    scrubbed, counts = pii.scrub("a@b.com 8.8.8.8", ["ipv4"])
    assert scrubbed == "a@b.com <IPV4>" and counts == {"ipv4": 1}


def test_overlapping_matches_become_one_placeholder():
    assert pii.scrub("x user@malicious.org@important.com y")[0] == "x <EMAIL> y"


def test_nothing_is_found_after_scrubbing():
    """The gate searches with the same detectors: whatever the scrubber leaves must pass it."""
    rng = random.Random(7)
    pieces = [
        "a@b.com",
        CARD,
        "8.8.8.8",
        "2001:4860:4860::8888",
        "+1 555 123 4567",
        AWS_KEY,
        KEY_BLOCK,
        "(555) 123-4567",
        "x",
        " ",
        "\n",
        "1",
        ".",
        ":",
        "@",
        "-",
        "42",
        "abc",
        "::",
    ]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        scrubbed, _ = pii.scrub(text)
        assert kinds(scrubbed) == [], (text, scrubbed)
        assert pii.scrub(scrubbed)[0] == scrubbed  # idempotent


def test_example_is_scrubbed_text_around_the_placeholder():
    text, _ = pii.scrub("header\nContact: jane@example.com for help\nfooter " + "x" * 100)
    excerpt = pii.example(text, "email", width=10)
    assert excerpt == "…⏎Contact: <EMAIL> for help⏎…"
    assert pii.example(text, "phone") is None


def test_detector_names_match_the_config():
    assert pii.KINDS == PII_KINDS.__args__
    assert DataConfig().pii == list(pii.KINDS)


def test_audit_examples_never_hold_the_personal_data(tmp_path):
    secrets = ["jane.doe@example.com", CARD, "8.8.4.4", AWS_KEY, "+44 20 7946 0958", "MIIEowIBAAKCAQEAx"]
    (tmp_path / "a.txt").write_text(
        f"Contact jane.doe@example.com or +44 20 7946 0958 about card {CARD}.\n"
        f"The resolver at 8.8.4.4 uses key {AWS_KEY} and\n{KEY_BLOCK}\nwith more words to pass the rules.\n"
    )
    cfg = DataConfig(min_chars=20)
    (tmp_path / "work").mkdir()
    (tmp_path / "out").mkdir()
    job = PartitionJob(
        0, [SourceFile(path=str(tmp_path / "a.txt"), name="a.txt", size=0, sha256="")], cfg, str(tmp_path / "work")
    )
    selection = select_documents([job], [clean_partition(job)], cfg, tmp_path / "out")
    stats = selection.stats
    audits.write(selection.audit, stats.docs_in, stats.docs_out, tmp_path / "out")  # as prepare does
    assert stats.docs_out == 1
    assert stats.pii == {
        "email": (1, 1),
        "phone": (1, 1),
        "credit_card": (1, 1),
        "ipv4": (1, 1),
        "aws_access_key": (1, 1),
        "private_key": (1, 1),
    }
    written = "".join((tmp_path / "out" / name).read_text() for name in ("train.jsonl", "holdout.jsonl"))
    audit = "".join((tmp_path / "out" / name).read_text() for name in ("audit.json", "audit.md"))
    for secret in secrets:
        assert secret not in written and secret not in audit
    assert "<EMAIL>" in audit and "a.txt" in audit  # the examples are there, scrubbed
    kept = json.loads(written.splitlines()[0])["text"]
    for placeholder in ("<EMAIL>", "<PHONE>", "<CREDIT_CARD>", "<IPV4>", "<AWS_ACCESS_KEY>", "<PRIVATE_KEY>"):
        assert placeholder in kept
