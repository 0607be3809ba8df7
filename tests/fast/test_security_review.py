"""The security review (#30), walked as an attacker would walk it: one attack per point, through the real code path
it would take. The point-by-point tests are beside this one (test_hostile_input, test_hostile_registry,
test_secret_kinds, test_credentials, test_serving_bounds, test_deployment_policy, test_glob_links,
test_mirror_lock, ...); this file keeps the whole review in one place, so that a regression in any point
fails here by the point's name.

Point 3 is walked end to end: one value of every kind the review lists is planted in a small corpus of
.py/.txt/.json/.yaml files, the real acquire and prepare stages run on it (configs/tiny.yaml), and the token
shards are decoded with the dataset's own tokenizer."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from helpers_configs import tiny
from helpers_hostile import Served, outside_folder, realpath_limit_attack, sparse_tar, survived, victim, zip_bytes
from helpers_registry import new_run, register_tagged
from helpers_secrets import CASES, SPLIT
from helpers_serving import tiny_served_files
from helpers_sources import write
from synthetic import synthetic_docs

from foundry.data.acquire import SourceError, acquire_source, list_source_files
from foundry.data.remote import digest_of

pytestmark = pytest.mark.usefixtures("home")  # a $FOUNDRY_HOME of each test's own (conftest.py)

PASSWORD = "review-s3cr3t-pw"


# --- 1. an http tar archive writing outside the home ------------------------------------------------------------


def test_1_the_realpath_limit_tar_writes_nothing_outside_its_folder(http_folder, tmp_path):
    """CVE-2025-4517's tar (a symlink chain past PATH_MAX, then a hard link through it) served over http."""
    outside_folder(tmp_path)
    cache = tmp_path / "home" / "sources" / "http" / digest_of(f"{http_folder[1]}/cve.tar.gz")
    target = write(cache / "flag", "original")  # where the chain's `escape` resolves: above the extraction
    served = Served(http_folder, tmp_path, "cve.tar.gz", realpath_limit_attack(cache / "extracting"))
    served.acquire(on_error="skip")
    served.assert_clean(extracted=True)  # nothing written outside the extracted copy
    assert target.read_text() == "original"


# --- 2. a registry tag deleting folders --------------------------------------------------------------------------


def test_2_a_champion_tagged_data_version_dotdot_deletes_nothing(tiny_config, tmp_path):
    """`..` as the champion's data version made `hydrated/..` (the home) the folder a failed check removed."""
    from foundry.registry.parent import fetch_champion
    from foundry.registry.tags import BadTag

    home = tmp_path / "home"
    target = victim(home / "victim")
    register_tagged(tiny_config, "review-hostile", {"data_version": "..", "data.remote": str(tmp_path / "remote")})
    with pytest.raises(BadTag, match=r"models:/review-hostile/1 tag data_version='\.\.' is not a data version"):
        fetch_champion("review-hostile", home)  # `foundry retrain`
    assert survived(target)


# --- 3. secrets and personal data reaching the shards ------------------------------------------------------------

PLANTED = CASES + SPLIT  # (kind, value, text): every kind the review lists, in prose, code, JSON and YAML
SUFFIXES = (".py", ".txt", ".json", ".yaml")
SPLITS = ("train", "holdout")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The planted corpus acquired and prepared by the real stages (tiny.yaml): (prepared folder, decoded text
    of the train and holdout shards). Each document is word soup around one planted text, and ends with a line
    of its own, "the end of document N", which shows that it reached the shards."""
    from tokenizers import Tokenizer

    from foundry.core.preparing import Preparing
    from foundry.pretrain.prepare import prepare
    from foundry.pretrain.shards import load_split

    base = tmp_path_factory.mktemp("planted")
    fillers = synthetic_docs(len(PLANTED), seed=3, words=40)
    for i, ((_, _, text), filler) in enumerate(zip(PLANTED, fillers)):
        head, tail = filler.rsplit("\n", 2)[0], filler.split("\n")[-2]
        write(base / "corpus" / f"doc{i:03d}{SUFFIXES[i % len(SUFFIXES)]}", f"{head}\n{text}\n{tail}\n")
    config = tiny(f"data.source={base / 'corpus'}", f"data.extensions=[{', '.join(SUFFIXES)}]")
    source = acquire_source(config.data, base / "source_manifest.json")
    prepare(Preparing(source, config, base / "prepared"))
    tokenizer = Tokenizer.from_file(str(base / "prepared" / "tokenizer.json"))
    decoded = [tokenizer.decode(np.asarray(load_split(base / "prepared", split)).tolist()) for split in SPLITS]
    return base / "prepared", "\n".join(decoded)


def planted_in(text: str) -> list[str]:
    """The planted values found in `text`, as they are and as JSON writes them."""
    return [value for _, value, _ in PLANTED if value in text or json.dumps(value)[1:-1] in text]


def test_3_every_planted_document_reaches_the_shards(prepared):
    """Without this, a document dropped by a quality rule would pass the next tests for the wrong reason."""
    _, decoded = prepared
    assert [i for i in range(len(PLANTED)) if f"the end of document {i}\n" not in decoded] == []


def test_3_no_planted_value_is_in_the_decoded_shards(prepared):
    _, decoded = prepared
    assert planted_in(decoded) == []


def test_3_no_planted_value_is_in_any_file_of_the_prepared_folder(prepared):
    """train.jsonl, holdout.jsonl, documents.csv, the audit, the tokenizer, the manifest: none holds one."""
    folder, _ = prepared
    found = {str(p.relative_to(folder)): planted_in(p.read_bytes().decode("latin-1")) for p in folder.rglob("*")}
    assert {name: values for name, values in found.items() if values} == {}


def test_3_the_audit_counts_every_kind_planted(prepared):
    folder, _ = prepared
    rules = json.loads((folder / "audit.json").read_text())["rules"]
    wanted = Counter(kind for kind, _, _ in PLANTED)
    short = {kind: (rules.get(kind, {}).get("documents", 0), n) for kind, n in wanted.items()}
    assert {kind: counts for kind, counts in short.items() if counts[0] < counts[1]} == {}


# --- 4. credentials in the config stored verbatim ----------------------------------------------------------------


def test_4_a_password_in_a_source_or_storage_url_is_in_no_stored_form_of_the_config():
    from foundry.config import to_yaml

    config = tiny(
        f"data.source=http://reader:{PASSWORD}@127.0.0.1:9/corpus.txt",
        f"search.storage=postgresql://optuna:{PASSWORD}@db:5432/studies",
    )
    stored = [to_yaml(config), json.dumps(config.flat()), config.model_dump_json()]  # params.yaml, MLflow, Prefect
    assert [PASSWORD in text for text in stored] == [False, False, False]


# --- 5. no size limits -------------------------------------------------------------------------------------------

BOMBS = [
    (
        "bomb.zip",
        lambda: zip_bytes({"zeros.txt": bytes(2 << 20)}),
        {"max_inflated_bytes": 512 << 10},
        "data.max_inflated_bytes",
    ),
    ("sparse.tar.gz", lambda: sparse_tar("huge.txt", 4 << 30), {}, "inflated bytes"),
    (
        "many.zip",
        lambda: zip_bytes({f"d{i}.txt": b"doc" for i in range(11)}),
        {"max_archive_members": 10},
        "data.max_archive_members",
    ),
    ("big.txt", lambda: b"word " * 2000, {"max_download_bytes": 1000}, "data.max_download_bytes"),
]


@pytest.mark.parametrize(("name", "build", "settings", "named"), BOMBS, ids=[bomb[0] for bomb in BOMBS])
def test_5_a_bomb_served_over_http_is_refused_before_it_fills_the_disk(
    http_folder, tmp_path, name, build, settings, named
):
    outside_folder(tmp_path)
    served = Served(http_folder, tmp_path, name, build())
    with pytest.raises(SourceError, match=named):
        served.acquire(**settings)
    served.assert_clean(extracted=False)


# --- 6. the served model unbounded -------------------------------------------------------------------------------


def test_6_the_served_model_refuses_an_unbounded_generation(tmp_path):
    import mlflow
    from mlflow.exceptions import MlflowException

    from foundry.serving.package import log_model

    model_pt, tokenizer_json, _ = tiny_served_files(tmp_path)
    served = mlflow.pyfunc.load_model(
        log_model(new_run("review"), model_pt, tokenizer_json, tiny().serving.model_dump())
    )
    with pytest.raises(MlflowException, match=r"params.max_new_tokens = 9223372036854775807") as refused:
        served.predict(pd.DataFrame({"prompt": ["river"]}), params={"max_new_tokens": 2**63 - 1})
    assert refused.value.get_http_status_code() == 400


# --- 7. deployment parameters reaching infrastructure ------------------------------------------------------------


def test_7_a_deployment_pointing_at_the_attackers_machines_is_refused_naming_each_key(tmp_path):
    from foundry.runtime.deployment_policy import NotAllowed, OperatorSettings, check_deployment_config

    hostile = {
        "data.scheduler": "tcp://203.0.113.7:8786",
        "data.remote": "s3://attacker/loot",
        "search.storage": "postgresql://attacker/optuna",
        "data.source": "/etc",
    }
    config = tiny(*[f"{key}={value}" for key, value in hostile.items()])
    with pytest.raises(NotAllowed) as refused:
        check_deployment_config(config, OperatorSettings.from_env({}), tmp_path / "home")
    assert [key for key in hostile if f"{key} = " not in str(refused.value)] == []


# --- 8. errors and leftovers -------------------------------------------------------------------------------------


def test_8_a_glob_source_does_not_follow_a_link_out_of_its_root(tmp_path):
    root = tmp_path / "corpus"
    write(root / "a.txt", "a document")
    write(tmp_path / "private" / "id_rsa.txt", "the victim's key")
    os.symlink(tmp_path / "private", root / "innocent")
    files, skipped = list_source_files(tiny(f"data.source={root}/**/*.txt").data)
    assert ([f.name for f in files], skipped) == (["a.txt"], {"symlink_outside_root": 1})
