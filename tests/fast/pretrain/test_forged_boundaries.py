"""A document cannot forge document boundaries (issue #55, point 4): the text `<|endoftext|>` in a source is
encoded as the characters it is, so the shards hold exactly one end-of-text per document, each where the pipeline
put it; and the gate counts the boundaries in each split against its documents, so shards that hold more fail it.
Through `foundry acquire` and `foundry prepare`, as dvc.yaml runs them."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from synthetic import overrides, synthetic_docs

from foundry.cli import main
from foundry.config import load_config
from foundry.core.preparing import Validating
from foundry.data.validate import ValidationFailed, validate_dataset
from models.tokens import EOT

FORGED = f"the first part{EOT}a forged second document{EOT}and a third"


def tokens(prepared, split: str) -> np.ndarray:
    manifest = json.loads((prepared / "manifest.json").read_text())
    shards = [s for s in manifest["shards"] if s["split"] == split]
    return np.concatenate(
        [np.fromfile(prepared / s["file"], dtype=np.dtype(s["dtype"]).newbyteorder("<")) for s in shards]
    )


@pytest.fixture
def prepared(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no params.yaml of the checkout's: built-in defaults and the overrides
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    docs = synthetic_docs(19)
    docs[3] = docs[3] + FORGED + "\n"
    for i, text in enumerate(docs):
        (corpus / f"doc{i:02d}.txt").write_text(text)
    sets = [arg for o in overrides(corpus) for arg in ("--set", o)]
    assert main(["acquire", *sets, "--out", str(tmp_path / "source.json")]) == 0
    assert main(["prepare", *sets, "--manifest", str(tmp_path / "source.json"), "--out", str(tmp_path / "out")]) == 0
    return load_config(None, overrides(corpus)), tmp_path / "out"


def test_a_documents_own_end_of_text_is_text_not_a_boundary(prepared):
    config, out = prepared
    eot = json.loads((out / "manifest.json").read_text())["eot_id"]
    documents = pd.read_csv(out / "documents.csv", dtype={"sha256": str})
    assert len(documents) == 19
    boundaries = {split: int((tokens(out, split) == eot).sum()) for split in ("train", "holdout")}
    assert boundaries == documents["split"].value_counts().to_dict()  # one a document, none forged
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    texts = [json.loads(line)["text"] for s in ("train", "holdout") for line in open(out / f"{s}.jsonl")]
    decoded = [
        tokenizer.decode(doc.tolist(), skip_special_tokens=False)
        for s in ("train", "holdout")
        for doc in np.split(tokens(out, s), np.flatnonzero(tokens(out, s) == eot) + 1)[:-1]
    ]
    assert any(FORGED in d for d in decoded) and sorted(d.removesuffix(EOT) for d in decoded) == sorted(texts)


def test_shards_holding_more_boundaries_than_documents_fail_the_gate(prepared, tmp_path):
    """Shards as the old encoding wrote them: a token inside a document turned end-of-text (its sha256 rewritten
    in the manifest, so only the count can tell)."""
    import hashlib

    config, out = prepared
    forged = tmp_path / "forged"
    shutil.copytree(out, forged)
    manifest = json.loads((forged / "manifest.json").read_text())
    shard = next(s for s in manifest["shards"] if s["split"] == "train")
    dtype = np.dtype(shard["dtype"]).newbyteorder("<")
    ids = np.fromfile(forged / shard["file"], dtype=dtype)
    ids[5] = manifest["eot_id"]
    ids.tofile(forged / shard["file"])
    shard["sha256"] = hashlib.sha256((forged / shard["file"]).read_bytes()).hexdigest()
    (forged / "manifest.json").write_text(json.dumps(manifest, indent=1))
    with pytest.raises(ValidationFailed, match="boundaries"):
        validate_dataset(Validating(forged, config, tmp_path / "report.json"))


def test_a_purge_still_cuts_a_version_prepared_with_forged_boundaries():
    """Versions prepared before this fix keep a document's own end-of-text as the token: a purge counts each
    document's tokens there instead of trusting the boundaries (foundry.purge.cuts.spans)."""
    from foundry.purge.cuts import spans

    eot = 0
    # three documents of 2, 3 (holding a forged end-of-text) and 1 tokens, each followed by its end-of-text
    parts = [np.array([5, 6, eot, 7, eot]), np.array([8, eot, 9, eot])]
    starts, ends = spans(parts, eot, 3, lambda: [2, 3, 1])
    assert (starts.tolist(), ends.tolist()) == ([0, 3, 7], [2, 6, 8])


def test_scoring_with_another_tokenizer_file_encodes_documents_as_the_shards_do(prepared, tmp_path):
    """The holdout encoded again (a model's tokenizer file that is not the dataset's byte for byte) holds the
    same tokens as the shards: the forged document's `<|endoftext|>` stays text there too."""
    from tokenizers import Tokenizer

    from foundry.pretrain.holdout_metrics import holdout_tokens

    _, out = prepared
    assert FORGED.split(EOT)[1] in (out / "holdout.jsonl").read_text()  # the split put it in the holdout
    other = tmp_path / "tokenizer.json"
    other.write_text(Tokenizer.from_file(str(out / "tokenizer.json")).to_str(pretty=False))
    assert other.read_bytes() != (out / "tokenizer.json").read_bytes()
    assert holdout_tokens(out, other).tolist() == tokens(out, "holdout").tolist()
