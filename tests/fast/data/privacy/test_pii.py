"""foundry.data.privacy.pii: each detector on what it must replace and what it must leave alone (code above all)."""

from __future__ import annotations

import json
import random

import pytest

from foundry.config import PII_KINDS, DataConfig
from foundry.core.contracts import SourceFile
from foundry.data import audit as audits
from foundry.data.privacy import pii
from foundry.pretrain.clean import PartitionJob, clean_partition, select_documents

# Test data only: documentation-style values, a Luhn-valid test card, AWS's documented example key,
# the IBANs of the ISO 13616 examples; tokens are assembled from parts, in the providers' shapes.
CARD = "4111 1111 1111 1111"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
KEY_BLOCK = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx\nabc+/=\n-----END RSA PRIVATE KEY-----"
CERT = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\nZmFrZSBjZXJ0aWZpY2F0ZQ==\n-----END CERTIFICATE-----"
PGP = "-----BEGIN PGP MESSAGE-----\nVersion: GnuPG v2\n\nhQEMA5\n=XyZ1\n-----END PGP MESSAGE-----"
IBAN = "GB82 WEST 1234 5698 7654 32"
GITHUB = "ghp_" + "Ab3De6Gh9Jk2" * 3
GITHUB_FINE = "github_pat_" + "11ABCDEFG0" + "ab12CD34ef56" + "_" + "x1Y2z3" * 9 + "abcde"
GITLAB = "glpat-" + "Xy9-Ab8_Cd7Ef6Gh5Ij4"
SLACK = "xoxb-" + "1234567890-0987654321-" + "AbCdEfGhIjKlMnOpQrStUv"
SLACK_HOOK = "https://hooks.slack.com/services/" + "T00000000/B00000000/" + "XXXXXXXXXXXXXXXXXXXXXXXX"
STRIPE = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"
GOOGLE = "AIza" + "SyA-1234567890abcdefghijklmnopqrstu"


def b64url(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).decode().rstrip("=")


JWT = ".".join(
    [b64url(b'{"alg":"HS256","typ":"JWT"}'), b64url(b'{"sub":"1234567890","name":"Jane"}'), "SflKxwRJSMeKKF2QT4fw"]
)


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
        ("listen on 10.0.0.8 and", "private_ipv4"),
        ("doc host 192.0.2.1 here", "private_ipv4"),
        ("server 2001:4860:4860::8888 here", "ipv6"),
        (f"card {CARD}.", "credit_card"),
        ("card 4111-1111-1111-1111 ok", "credit_card"),
        ("amex 378282246310005 ok", "credit_card"),
        (f"key = '{AWS_KEY}'", "aws_access_key"),
        (f"aws_secret_access_key = {AWS_SECRET}\n", "aws_secret_key"),
        (f"x\n{KEY_BLOCK}\ny", "private_key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA", "private_key"),  # cut off: still a key
        ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----", "private_key"),
        ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----", "private_key"),
        (f"chain:\n{CERT}\n", "pem_block"),
        ("-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----", "pem_block"),
        (f"{PGP}\n", "pem_block"),
        (f"token = {GITHUB}\n", "github_token"),
        (f"use {GITHUB_FINE} here", "github_token"),
        (f"CI_TOKEN {GITLAB}.", "gitlab_token"),
        (f"bot {SLACK} ok", "slack_token"),
        (f"post to {SLACK_HOOK}", "slack_token"),
        (f"stripe.api_key_value({STRIPE!r})", "stripe_key"),
        (f"maps?key={GOOGLE}&x=1", "google_api_key"),
        (f"Authorization: Bearer {JWT}", "jwt"),
        ('password = "hunter22"', "secret_assignment"),
        ("DB_PASSWORD=hunter22", "secret_assignment"),
        ("export API_KEY=abc123def456", "secret_assignment"),
        ('{"client_secret": "s3cr3t-value"}', "secret_assignment"),
        ("  db_passwd: correct-horse\n", "secret_assignment"),
        ("SECRET_KEY = 'django-insecure-x8#2'", "secret_assignment"),
        (f"pay to {IBAN}, thanks", "iban"),
        ("IBAN DE89370400440532013000.", "iban"),
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
        "listen on 127.0.0.1 and 169.254.169.254",  # loopback and link-local addresses name no network
        "doc range 192.0.2.0/24 and fe80::1:2:3",  # a documentation block's own name, link-local IPv6
        "n = 1234567890123456",  # fails the Luhn check
        "big = 4111111111111111111111",  # too many digits for a card
        "hash 0x7fffffff and 123456789",  # bare digit runs are not phones
        "x = 10 ** 9 + 7; y = 1e-6",
        "AKIA is a prefix, AKIAshort too",  # too short for an access key
        'PEM_HEADER = "-----BEGIN CERTIFICATE-----"\nPEM_FOOTER = "-----END CERTIFICATE-----"',  # ssl.py
        "password = getpass.getpass()",  # code reading a password is not one
        "    password = passwd",
        "password = None\nsecret = os.urandom(16)",
        "login(user, password=password)\n    password=password,\n",
        "self.password = password  # set later",
        "passwords = ['a', 'b']; password_hash = 'sha256'",
        "password = '*********'; password = '<SECRET>'; pwd = '/home/user'",
        "passwd: str\n",
        "token = tokens[0]; key = 'abcdefgh'",  # neither name says secret
        "GB82 WEST 1234 5698 7654 33",  # fails the mod-97 check
        "XX82 WEST 1234 5698 7654 32",  # no such country
        "eyJhbGciOiJIUzI1.eyJzdWIiOiIx.abc and eyJub3QganNvbg.eyJzdWIiOiIxMjM0.sig",  # header not JSON with alg
        "ghp_tooShort and sk_live_short and AIzaShort",
    ],
)
def test_leaves_alone(text):
    assert kinds(text) == []


def test_secret_assignments_replace_the_value_and_keep_the_name():
    scrubbed, counts = pii.scrub('DB_PASSWORD=hunter22\npassword = "hunter22" # set\n')
    assert scrubbed == 'DB_PASSWORD=<SECRET>\npassword = "<SECRET>" # set\n' and counts == {"secret_assignment": 2}


def test_iban_check():
    from foundry.data.privacy.pii_patterns import iban_ok

    assert iban_ok("GB82WEST12345698765432") and iban_ok("DE89 3704 0044 0532 0130 00")
    assert not iban_ok("GB82WEST12345698765433") and not iban_ok("GB82WEST1234569876543")


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
        IBAN,
        GITHUB,
        JWT,
        CERT,
        "\npassword = 'hunter22'\n",
        "\nAPI_KEY=abc123def456\n",
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


def test_example_is_the_masked_text_around_the_placeholder():
    text, _ = pii.scrub("header\nContact: jane@example.com for help\nfooter " + "x" * 100)
    excerpt = pii.example(text, "email", width=10)
    assert excerpt == "…⏎Xxxxxxx: <EMAIL> xxx xxxx⏎…"
    assert pii.example(text, "phone") is None


def test_an_excerpt_shows_word_shapes_never_what_stands_beside_the_placeholder():
    """A name, a number and an address the scrubber was not asked to replace, right next to a placeholder."""
    text, _ = pii.scrub("Dear Jane Smith (acct 99812, at 8.8.4.4): mail jane@example.com, pw Tr0ub4dor&3", ["email"])
    excerpt = pii.example(text, "email", width=60)
    assert excerpt == "Xxxx Xxxx Xxxxx (xxxx 99999, xx 9.9.9.9): xxxx <EMAIL>, xx Xx9xx9xxx&9"
    for planted in ("Jane", "Smith", "99812", "8.8.4.4", "Tr0ub4dor"):
        assert planted not in excerpt


def test_detector_names_match_the_config():
    assert pii.KINDS == PII_KINDS.__args__
    assert DataConfig().pii == list(pii.KINDS)


def clean_one(tmp_path, text: str, cfg: DataConfig):
    """One document through the partition and global cleaning steps, and the audit, as prepare runs them."""
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "work").mkdir()
    (tmp_path / "out").mkdir()
    job = PartitionJob(
        0, [SourceFile(path=str(tmp_path / "a.txt"), name="a.txt", size=0, sha256="")], cfg, str(tmp_path / "work")
    )
    selection = select_documents([job], [clean_partition(job)], cfg, tmp_path / "out")
    stats = selection.stats
    audits.write(selection.audit, stats.docs_in, stats.docs_out, tmp_path / "out")
    written = "".join((tmp_path / "out" / name).read_text() for name in ("train.jsonl", "holdout.jsonl"))
    audit = "".join((tmp_path / "out" / name).read_text() for name in ("audit.json", "audit.md"))
    return stats, written, audit


def test_audit_examples_never_hold_the_personal_data(tmp_path):
    secrets = ["jane.doe@example.com", CARD, "8.8.4.4", AWS_KEY, "+44 20 7946 0958", "MIIEowIBAAKCAQEAx"]
    secrets += [GITHUB, GITLAB, SLACK, STRIPE, GOOGLE, JWT, IBAN, "hunter22", "ZmFrZSBjZXJ0aWZpY2F0ZQ"]
    stats, written, audit = clean_one(
        tmp_path,
        f"Contact jane.doe@example.com or +44 20 7946 0958 about card {CARD}.\n"
        f"The resolver at 8.8.4.4 uses key {AWS_KEY} and\n{KEY_BLOCK}\nwith more words to pass the rules.\n"
        f"Tokens {GITHUB} {GITLAB} {SLACK} {STRIPE} {GOOGLE} and {JWT} pay {IBAN}.\n"
        f"password = 'hunter22'\n{CERT}\n",
        DataConfig(min_chars=20),
    )
    assert stats.docs_out == 1
    kinds = ("email", "phone", "credit_card", "ipv4", "aws_access_key", "private_key", "github_token", "gitlab_token")
    kinds += ("slack_token", "stripe_key", "google_api_key", "jwt", "iban", "secret_assignment", "pem_block")
    assert stats.pii == {kind: (1, 1) for kind in kinds}  # each kind counted like the others
    for secret in secrets:
        assert secret not in written and secret not in audit
    assert "<EMAIL>" in audit and "a.txt" in audit  # the examples are there, masked
    audited = json.loads((tmp_path / "out" / "audit.json").read_text())["rules"]
    assert {kind: (audited[kind]["documents"], audited[kind]["spans"]) for kind in kinds} == stats.pii
    kept = json.loads(written.splitlines()[0])["text"]
    for kind in kinds:
        assert pii.PLACEHOLDERS[kind] in kept


def test_the_audit_masks_what_the_scrubber_was_not_asked_to_replace(tmp_path):
    """Only e-mail is scrubbed here: the name, the address and the card number beside it stay in the
    text (the gate reports them), but never reach the audit's excerpts."""
    planted = ["Jane", "Smith", "8.8.4.4", CARD, "Tr0ub4dor"]
    text = f"Dear Jane Smith ({CARD}, 8.8.4.4): mail jane@example.com, pw Tr0ub4dor&3, about the rules.\n"
    stats, written, audit = clean_one(tmp_path, text, DataConfig(min_chars=20, pii=["email"]))
    assert stats.pii == {"email": (1, 1)} and all(p in written for p in planted)
    assert "<EMAIL>" in audit
    for secret in planted:
        assert secret not in audit
