"""#55 points 8 and 10 through the real `foundry acquire` and `foundry prepare` (configs/tiny.yaml), whose gate asks
both detectors: the changelog and code lines that stopped ordinary runs pass the gate, and the secrets and numbers
the scrubber missed (a fine-grained GitHub token, a Mailgun key, a SIN, an Aadhaar number, a passport number, a
date of birth, a private address, a hard-wrapped token) leave no trace in the prepared documents, without stopping
the run. Each detector and each kind alone, in prose, code, JSON and YAML: test_detector_prose.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from synthetic import synthetic_docs
from test_detector_prose import AADHAAR, GITHUB, GITHUB_FINE, MAILGUN, PASSPORT, PROSE, SIN

from foundry.cli import main

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)

TINY = str(REPO_ROOT / "configs" / "tiny.yaml")
SECRETS = {
    GITHUB_FINE[1]: f"The deploy used {GITHUB_FINE[1]} until it was rotated.",
    MAILGUN: f"mailgun:\n  api_key: {MAILGUN}\n",
    SIN: f"My SIN is {SIN}, please keep it.",
    AADHAAR: f'{{"aadhaar": "{AADHAAR.replace(" ", "")}"}}',
    PASSPORT: f'passport = "{PASSPORT}"\n',
    "12 March 1985": "Jane Doe, born 12 March 1985, lives in Leeds.",
    "10.1.2.3": "The primary answers on 10.1.2.3; fail over to the replica.",
    GITHUB[20:]: f"Here is the token: {GITHUB[:20]}\n{GITHUB[20:]} keep it safe.",
}


def prepared(tmp_path: Path, extras: list[str]) -> tuple[int, str]:
    """Thirty ordinary documents, each of `extras` appended to one of them, acquired and prepared: (exit status,
    every prepared document's text)."""
    src = tmp_path / "src"
    src.mkdir()
    for i, text in enumerate(synthetic_docs(30, seed=7)):
        (src / f"doc{i:02d}.txt").write_text(text + ("\n\n" + extras[i] if i < len(extras) else ""))
    manifest, out = tmp_path / "source_manifest.json", tmp_path / "prepared"
    common = ["--config", TINY, "--set", f"data.source={src}"]
    code = main(["acquire", *common, "--out", str(manifest)])
    if code == 0:
        code = main(["prepare", *common, "--manifest", str(manifest), "--out", str(out)])
    texts = [json.loads(line)["text"] for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    return code, "\n".join(texts)


def test_changelog_and_code_lines_pass_the_gate_of_a_real_prepare(tmp_path):
    """Fails on 80850a5's code: the second detector stopped the run (`secret_assignment` on `signing-key: Updated.`)."""
    code, text = prepared(tmp_path, PROSE)
    assert code == 0
    assert "signing-key: Updated." in text and "PREVENT_NO_AUTH" in text  # kept as written, not scrubbed away


def test_the_secrets_the_scrubber_missed_are_gone_from_a_real_prepare_without_stopping_it(tmp_path):
    """Fails on 80850a5's code: the fine-grained token stopped the run at the gate; the others stayed in the text."""
    code, text = prepared(tmp_path, list(SECRETS.values()))
    assert code == 0
    assert [value for value in SECRETS if value in text] == []
    assert "Jane Doe" in text and "fail over to the replica" in text  # the prose around them kept
