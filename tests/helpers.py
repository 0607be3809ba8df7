"""Builders that test modules of both lanes share (tests/fast/, tests/slow/). Fixtures live in conftest.py;
these are plain functions and values, so a test module imports them by name and no test module imports another."""

from __future__ import annotations

import base64
import gzip
import io
import os
import shutil
import tarfile
import threading
import time
import urllib.parse
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from conftest import REPO_ROOT

from foundry.checkpointing.manifest import read_manifest
from foundry.config import DataConfig, FoundryConfig, load_config
from foundry.data.acquire import list_source_files
from foundry.data.remote import digest_of
from foundry.training.trainer import weights_digest
from models.align_data import Conversations, Ragged
from models.chat import ChatTemplate, add_chat_tokens
from models.gpt import GPT, GPTConfig

# --- configs and checkpoints --------------------------------------------------------------------------


def tiny(*overrides: str) -> FoundryConfig:
    """configs/tiny.yaml (the CPU twin) with `overrides`."""
    return load_config(REPO_ROOT / "configs" / "tiny.yaml", list(overrides))


# For a flow whose test reads no compressor baseline: xz -9e and PPMd on tiny.yaml's 256 KiB of context cost
# seconds per evaluation; with none they still run (the metrics and card rows exist), on the holdout alone.
NO_BASELINES = ("evaluation.compression_context_bytes=0", "evaluation.strong_context_bytes=0")

IMAGE_CLASSES = ("bright", "dark", "stripes")


def write_image_dataset(root: Path, size: int = 12) -> Path:
    """48 gray images of `IMAGE_CLASSES` (bright, dark, striped: learnable in a few steps) as a prepared image
    dataset: 36 for training in 4 shards of 10, 10, 10, 6 and 12 held out in 2. Returns its folder."""
    from PIL import Image

    from foundry.vision.shards import ImageRecord, write_shards

    rng, records = np.random.default_rng(0), []
    (root / "png").mkdir(parents=True, exist_ok=True)
    for n in range(48):
        label, noise = IMAGE_CLASSES[n % 3], rng.integers(0, 40, (size, size))
        stripes = np.where(np.arange(size)[:, None] % 2 == 0, 215, 0)  # rows alternately bright and dark
        pixels = {"bright": 215 + noise, "dark": noise, "stripes": stripes + noise}[label]
        path = root / "png" / f"{n:03d}.png"
        Image.fromarray(pixels.astype(np.uint8), mode="L").save(path)
        records.append(ImageRecord(str(path), label, "train" if n < 36 else "holdout"))
    write_shards(records, root / "data", shard_images=10)
    return root / "data"


def digest(model_pt: Path) -> str:
    return weights_digest(torch.load(model_pt, weights_only=True)["state_dict"])


def wait_for_checkpoint(directory: Path, running: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not read_manifest(directory):
        assert running(), "training ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.02)


# --- state built once per module -----------------------------------------------------------------------


class Snapshot:
    """Folders built once (a home, say, with its DVC workspace and MLflow artifacts) and put back before each test
    at the same absolute paths: MLflow and DVC record absolute paths (artifact locations, remotes, run sources),
    so a copy elsewhere would not be the same state. The pristine copies are kept beside, under `kept`."""

    def __init__(self, kept: Path, *folders: Path) -> None:
        self.pairs = [(folder, kept / f"{i}-{folder.name}") for i, folder in enumerate(folders)]
        for folder, copy in self.pairs:
            shutil.copytree(folder, copy, symlinks=True)

    def restore(self) -> None:
        """Each folder as it was when the snapshot was taken, whatever the last test did to it."""
        for folder, copy in self.pairs:
            if folder.exists() or folder.is_symlink():
                _writable(folder)
                shutil.rmtree(folder)
            shutil.copytree(copy, folder, symlinks=True)


def _writable(root: Path) -> None:
    """Folders a test left read-only made writable again, so that they can be removed."""
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]:
        if not os.access(folder, os.W_OK | os.X_OK):
            folder.chmod(folder.stat().st_mode | 0o700)


# --- search ---------------------------------------------------------------------------------------------

LR_ONLY = "search.space=[{key: train.learning_rate, distribution: log_uniform, low: 1.0e-7, high: 0.03}]"


def study_config(tmp_path: Path, *extra: str) -> FoundryConfig:
    """The tiny twin with a study journal of the test's own."""
    return tiny(f"search.storage={tmp_path / 'study.journal'}", "search.study_name=bookkeeping", *extra)


# --- sources --------------------------------------------------------------------------------------------

SHORT_BACKOFF = {"fetch_backoff_s": 0.01}  # the waits are the same code; the test need not sit through them


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def tar_gz(members: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# --- hostile sources (#30 points 1 and 5: tests/fast/test_hostile_input.py, test_security_review.py) -------------

FAST = {"fetch_backoff_s": 0.01, "fetch_retries": 0}  # no retries either: a refusal is final


def tar_bytes(add, compression: str = "gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{compression}", format=tarfile.GNU_FORMAT) as tf:
        add(tf)
    return buffer.getvalue()


def add_file(tf: tarfile.TarFile, name: str, data: bytes = b"text") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def add_link(tf: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tf.addfile(info)


def add_dir(tf: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o777
    tf.addfile(info)


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def files_under(root: Path) -> dict[str, bytes]:
    """Every regular file under `root`, links not followed."""
    found = {}
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath, name)
            if not path.is_symlink() and path.is_file():
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


class Served:
    """An archive published on the test http server, where acquire mirrors it, and what the machine held
    before: the only files acquire may add are its own bookkeeping and the extracted copy."""

    def __init__(self, http_folder, tmp_path: Path, name: str, data: bytes) -> None:
        self.www, base = http_folder
        (self.www / name).write_bytes(data)
        self.url, self.tmp_path = f"{base}/{name}", tmp_path
        self.cache = tmp_path / "home" / "sources" / "http" / digest_of(self.url)
        self.before = files_under(tmp_path)

    def acquire(self, **settings):
        return list_source_files(DataConfig(source=self.url, **{**FAST, **settings}))

    def assert_clean(self, extracted: bool) -> None:
        """The target untouched, the source unchanged, nothing half-extracted, no file added elsewhere."""
        assert (self.tmp_path / "outside" / "flag").read_text() == "original"
        assert not (self.cache / "extracting").exists()
        assert (self.cache / "extracted").exists() == extracted
        own = {self.cache / Path(self.url).name, self.cache / "extracted.left-out.json"}
        own |= {self.cache.with_name(self.cache.name + suffix) for suffix in (".lock", ".origin.json")}
        after = files_under(self.tmp_path)
        changed = {
            self.tmp_path / name
            for name, data in after.items()
            if self.before.get(name) != data and not (self.tmp_path / name).is_relative_to(self.cache / "extracted")
        }
        assert changed <= own, changed - own
        assert all(after[name] == data for name, data in self.before.items())


def realpath_limit_attack(dest: Path) -> bytes:
    """CVE-2025-4517, as CPython's test_realpath_limit_attack builds it: a symlink chain whose expansion
    passes PATH_MAX, so that realpath stops checking, then a hard link and a file through it."""
    steps = "abcdefghijklmnop"
    component = "d" * ((os.pathconf(dest.parent, "PC_PATH_MAX") - len(str(dest)) - 1) // (len(steps) + 1))

    def add(tf):
        path = ""
        for step in steps:
            add_dir(tf, os.path.join(path, component))
            add_link(tf, os.path.join(path, step), component)
            path = os.path.join(path, component)
        linkpath = os.path.join(*steps, "l" * 254)
        add_link(tf, linkpath, os.path.join(*[".."] * len(steps)))
        add_link(tf, "escape", os.path.join(linkpath, ".."))
        add_link(tf, "flaglink", os.path.join("escape", "flag"), tarfile.LNKTYPE)
        add_file(tf, "flaglink", b"overwrite")
        add_file(tf, "escape/newfile", b"new")
        add_file(tf, "doc.txt", b"a document")

    return tar_bytes(add)


def sparse_tar(name: str, size: int) -> bytes:
    """An old-GNU sparse member: a header whose map says `size` bytes of holes, no data at all."""
    info = tarfile.TarInfo(name)
    info.type, info.size = tarfile.GNUTYPE_SPARSE, 0
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    header[483:495] = b"%011o\0" % size  # realsize
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header[:512])
    return gzip.compress(bytes(header) + bytes(1024))


def outside_folder(tmp_path: Path) -> Path:
    """The attacker's target: a folder beside FOUNDRY_HOME holding a file they want overwritten."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "flag").write_text("original")
    return folder


# --- hostile registry values (#30 point 2: tests/fast/test_hostile_registry.py, test_security_review.py) ---------


def victim(folder: Path) -> Path:
    """A folder with a file in it: what an attack would delete."""
    folder.mkdir(parents=True)
    (folder / "precious.txt").write_text("keep me")
    return folder


def survived(folder: Path) -> bool:
    return (folder / "precious.txt").read_text() == "keep me"


def register_tagged(config: FoundryConfig, name: str, tags: dict[str, str]):
    """A version of `name` in the session's embedded MLflow registry, its champion, carrying the `tags` an
    attacker set; returns the MLflow ModelVersion."""
    from foundry.registry import versions
    from foundry.runtime import tracking

    run_id = tracking.start_pipeline_run(config, run_name=f"hostile-{name}")
    version = versions.publish(f"runs:/{run_id}/none", name, run_id, tags, True, "seeded by the test").version
    return tracking.client().get_model_version(name, version)


# --- secrets and personal data (#30 point 3: tests/fast/test_secret_kinds.py, test_security_review.py) ------------

# Test data only, assembled from parts in the providers' documented shapes; none is a real credential.
RAND = "Ab3De6Gh9Jk2Lm5No8Pq1Rs4Tu7Vw0Xy"  # 32 mixed characters
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_SESSION = "IQoJb3JpZ2luX2VjE" + RAND * 4
AZURE_KEY = base64.b64encode(bytes(range(7, 71))).decode()  # 88 characters ending "=="
SAS_SIG = urllib.parse.quote(base64.b64encode(bytes(range(90, 122))).decode(), safe="")
OPENAI = "sk-" + "proj-" + RAND + "T3BlbkFJ" + RAND[:20]
ANTHROPIC = "sk-" + "ant-api03-" + RAND * 2 + "_x-" + RAND[:20] + "AA"
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
NPM = "npm_" + RAND + "Zz99"
PYPI = "pypi-" + "AgEIcHlwaS5vcmc" + RAND * 2
SENDGRID = "SG." + RAND[:22] + "." + RAND + "Kk7Mm1Nn3Pp"
GOOGLE_OAUTH = "GOCSPX-" + RAND[:28]
JWT_HEADER = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
BASIC = base64.b64encode(b"alice:Tr0ub4dor&3").decode()
PEM_BODY = "MIIEowIBAAKCAQEA" + RAND
KEY_BLOCK = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
KEY_DATA = base64.b64encode(KEY_BLOCK.encode()).decode()
KEY_IN_JSON = KEY_BLOCK.replace("\n", "\\n")  # as a service-account file holds it

VENDOR_TOKENS = [OPENAI, ANTHROPIC, HF, NPM, PYPI, SENDGRID, GOOGLE_OAUTH]


def contexts(value: str) -> list[str]:
    """The value standing alone, in code, JSON and YAML, under a neutral name."""
    return [
        f"the key {value} was leaked",
        f'client = Client("{value}")\n',
        f"const client = new Client('{value}');\n",
        f'curl -s https://api.example.com --data "{value}"\n',
        f'{{"client": {{"value": "{value}"}}}}',
        f"client:\n  value: {value}\n",
    ]


# (kind, the secret or personal value, a text holding it)
CASES = [(kind, token, text) for token in VENDOR_TOKENS for text in contexts(token) for kind in ["api_token"]]
CASES += [
    ("aws_secret_key", AWS_SECRET, f'{{"Credentials": {{"SecretAccessKey": "{AWS_SECRET}", "Expiration": "x"}}}}'),
    ("aws_secret_key", AWS_SESSION, f'{{"Credentials": {{"SessionToken": "{AWS_SESSION}"}}}}'),
    ("aws_secret_key", AWS_SECRET, f"[default]\naws_secret_access_key = {AWS_SECRET}\n"),
    ("aws_secret_key", AWS_SESSION, f"export AWS_SESSION_TOKEN={AWS_SESSION}\n"),
    ("aws_secret_key", AWS_SECRET, f"aws configure set aws_secret_access_key {AWS_SECRET}\n"),
    (
        "azure_key",
        AZURE_KEY,
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={AZURE_KEY};EndpointSuffix=x",
    ),
    ("azure_key", AZURE_KEY, f'conn = "Endpoint=sb://acme/;SharedAccessKeyName=root;SharedAccessKey={AZURE_KEY}"'),
    ("url_credentials", SAS_SIG, f"https://acme.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&sig={SAS_SIG}"),
    ("url_credentials", "Hunter2Pass", "DATABASE_URL=postgres://app:Hunter2Pass@10.0.0.5:5432/app\n"),
    ("url_credentials", "s3cr3tPw", 'redis = Redis.from_url("redis://:s3cr3tPw@localhost:6379/0")\n'),
    ("url_credentials", "pa55w0rd", '{"url": "https://alice:pa55w0rd@192.168.1.10/api"}'),
    ("url_credentials", "ya" + RAND, f"GET https://api.example.com/v1/me?access_token=ya{RAND}&fields=id"),
    ("url_credentials", RAND, f'fetch("https://api.example.com/items?page=2&token={RAND}")'),
    ("secret_assignment", "hunter22", "DB_PASS=hunter22\n"),
    ("secret_assignment", RAND, f"PGPASSWORD={RAND} psql -h db app\n"),
    ("secret_assignment", RAND, f"$env:GITHUB_TOKEN = '{RAND}'\n"),
    ("secret_assignment", "Tr0ub4dor&3", "Server=db;Database=app;User Id=sa;Pwd=Tr0ub4dor&3;\n"),
    ("secret_assignment", RAND, f'token = "{RAND}"\n'),
    ("secret_assignment", RAND, f"const token = '{RAND}';\n"),
    ("secret_assignment", RAND, f"kind: Config\nusers:\n- name: ci\n  user:\n    token: {RAND}\n"),
    ("secret_assignment", BASIC, f'{{"auths": {{"registry.example.com": {{"auth": "{BASIC}"}}}}}}'),
    ("secret_assignment", "s3cretPw9", "machine api.example.com\n  login alice\n  password s3cretPw9\n"),
    ("secret_assignment", "s3cretPw9", "machine api.example.com login alice password s3cretPw9\n"),
    ("secret_assignment", "Tr0ub4dor&3", "mysql --user root --password Tr0ub4dor&3 app\n"),
    ("auth_header", RAND, f"Authorization: Bearer {RAND}\n"),
    ("auth_header", BASIC, f'curl -H "Authorization: Basic {BASIC}" https://api.example.com\n'),
    ("auth_header", RAND, f'headers = {{"Authorization": "Bearer {RAND}"}}\n'),
    ("auth_header", RAND, f"fetch(url, {{headers: {{'X-API-Key': '{RAND}'}}}})\n"),
    ("private_key", PEM_BODY, f'{{"type": "service_account", "private_key": "{KEY_IN_JSON}"}}'),
    ("private_key", KEY_DATA, f"users:\n- name: ci\n  user:\n    client-key-data: {KEY_DATA}\n"),
    ("national_id", "123-45-6789", "Applicant SSN: 123-45-6789, born 1980."),
    ("national_id", "123456789", '{"ssn": "123456789"}'),
    ("national_id", "AB123456C", "National Insurance number AB123456C on file"),
    ("national_id", "AB 12 34 56 C", "nino: AB 12 34 56 C\n"),
    ("phone", "+447946095800", '{"phone": "+447946095800"}'),
    ("phone", "+14155550123", "call +14155550123 today"),
    ("iban", "gb82west12345698765432", "iban = 'gb82west12345698765432'\n"),
    ("iban", "de89 3704 0044 0532 0130 00", "pay to de89 3704 0044 0532 0130 00 please"),
    ("credit_card", "4111.1111.1111.1111", "card: 4111.1111.1111.1111\n"),
    ("credit_card", "5500/0000/0000/0004", "paid with 5500/0000/0000/0004 today"),
    ("email", "jane.doe@example.org", '{"email": "jane.doe@example.org"}'),
]
# Keys split across lines: string concatenation in Python and JS, a shell line continuation.
SPLIT = [
    ("api_token", OPENAI, f'key = ("{OPENAI[:20]}"\n       "{OPENAI[20:]}")\n'),
    ("api_token", HF, f"const key = '{HF[:12]}' +\n  '{HF[12:]}';\n"),
    ("api_token", NPM, f"export NPM_TOKEN={NPM[:18]}\\\n{NPM[18:]}\n"),
]


# --- the served model (#30 point 6: tests/fast/test_serving_bounds.py, test_security_review.py) ------------------


def plain_tokenizer():
    """A 300-token byte-level BPE trained on one repeated sentence, without the chat template's markers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(["river stone light, add two and three: five"] * 20, trainer)
    return tok


def tiny_tokenizer(path):
    """`plain_tokenizer` with the chat template's markers, saved at `path`."""
    tok = plain_tokenizer()
    add_chat_tokens(tok, ChatTemplate())
    tok.save(str(path))
    return tok


def tiny_served_files(root: Path) -> tuple[Path, Path, Path]:
    """A tiny model aligned (`model.pt`, its chat template inside) and not (`base.pt`), and `tokenizer.json`."""
    tokenizer = tiny_tokenizer(root / "tokenizer.json")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.get_vocab_size(), block_size=32, n_layer=2, n_head=2, n_embd=32))
    saved = {"model_args": model.config.to_dict(), "state_dict": model.state_dict()}
    torch.save({**saved, "chat_template": ChatTemplate().to_dict()}, root / "model.pt")
    torch.save(saved, root / "base.pt")
    return root / "model.pt", root / "tokenizer.json", root / "base.pt"


def new_run(name: str) -> str:
    """A run of its own in the session's MLflow `foundry` experiment, to log a model to."""
    from foundry.runtime import tracking

    return tracking.client().create_run(tracking.experiment_id("foundry"), run_name=name).info.run_id


# --- exported models (#25: tests/fast/test_export_*.py, tests/slow/test_export_gguf_llama.py) ----------------

EXPORT_CORPUS = [
    "The river carried the stone past the old mill, and the light fell on the water.",
    "Add two and three: five. Add four and four: eight. Numbers 12, 345 and 6789 too.",
    "def main():\n    return sum(range(10))  # tabs\tand spaces",
    "Ünïcödé text, émigré café, naïve façade; 東京 and 北京.",
] * 30


def corpus_tokenizer(path: Path, chat: bool = False):
    """A byte-level BPE trained on `EXPORT_CORPUS` as Foundry trains one, with the chat markers when `chat`,
    saved at `path`."""
    from foundry.config.training import TokenizerConfig
    from foundry.data.shards import train_tokenizer

    tokenizer = train_tokenizer(EXPORT_CORPUS, TokenizerConfig(vocab_size=400, min_frequency=1))
    if chat:
        add_chat_tokens(tokenizer, ChatTemplate())
    tokenizer.save(str(path))
    return tokenizer


def sharp_gpt(vocab_size: int, positions: str, seed: int = 0) -> GPT:
    """Random weights large enough that the next token is never a near tie, so greedy decoding and likelihoods
    are sharp tests of an export (a wrong mapping moves them far)."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size, block_size=128, n_layer=2, n_head=4, n_embd=32, positions=positions))
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm_gain = ".ln_" in name and name.endswith("weight")
            p.copy_(1 + 0.1 * torch.randn_like(p) if norm_gain else 0.3 * torch.randn_like(p))
    return model.eval()


# --- locks ----------------------------------------------------------------------------------------------


def holds_then_waits(first_home, second_home, name: str) -> list[str]:
    """Thread A takes the lock and holds it 2 s; thread B, started meanwhile, must get it only after."""
    from tasks.locks import promotion_lock

    order, taken = [], threading.Event()

    def first():
        with promotion_lock(name, first_home):
            taken.set()
            order.append("A in")
            time.sleep(2)
            order.append("A out")

    def second():
        taken.wait()
        with promotion_lock(name, second_home):
            order.append("B in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return order


# --- alignment samplers ---------------------------------------------------------------------------------


def many_conversations(n: int = 30) -> Conversations:
    rng = np.random.default_rng(0)
    tokens = [[30, *rng.integers(1, 29, size=int(rng.integers(2, 9))).tolist(), 33] for _ in range(n)]
    trained = [[0] * (len(t) // 2) + [1] * (len(t) - len(t) // 2) for t in tokens]
    return Conversations(Ragged.from_lists(tokens), Ragged.from_lists(trained))


def as_lists(batches) -> list:
    return [[t.tolist() for t in batch] for batch in batches]


def assert_resumes_exactly(make) -> None:
    """A loader `make()` builds, stopped after three batches and resumed from its state through JSON, yields what
    one uninterrupted loader yields over two epochs."""
    import json

    full = make()
    uninterrupted = as_lists(list(full) + list(full))
    first = make()
    batches = iter(first)
    seen = as_lists([next(batches) for _ in range(3)])
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert seen + as_lists(list(resumed) + list(resumed)) == uninterrupted


# A LightningModule of the alignment methods, as small as it gets, and its optimiser settings.
TINY_LIT_ARGS = {"vocab_size": 40, "block_size": 16, "n_layer": 1, "n_head": 2, "n_embd": 16, "dropout": 0.0}
TINY_LIT_SETTINGS = dict(
    learning_rate=1e-2,
    optimizer="adamw",
    muon_learning_rate=0.02,
    weight_decay=0.0,
    warmup_steps=0,
    max_steps=5,
    min_lr_ratio=1.0,
    log_every_n_steps=100,
    peak_flops=0.0,
)


def merge_score(holdout: str, merged: float, base: float, specialist: float | None):
    """A merge's score on one holdout, beside the base's and (on a specialist's own holdout) the specialist's."""
    from foundry.specialists.contracts import HoldoutScore

    return HoldoutScore(
        holdout_of=holdout,
        data_version="d",
        merged_bits_per_byte=merged,
        base_bits_per_byte=base,
        specialist_bits_per_byte=specialist,
    )


# --- registered versions without training (#26: tests/fast/test_fleet_evaluate.py, tests/slow/test_evaluate_flow.py)


def random_model_files(config: FoundryConfig, tokenizer, folder: Path, logit_scale: float) -> tuple[Path, Path]:
    """`model.pt` of random weights shaped by `config.model` for `tokenizer`, and the tokenizer beside it; logit
    scale 0 gives the uniform distribution (ln V nats a token on anything)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.get_vocab_size(), **config.model.model_dump()))
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)  # tied to the embedding: the output scale follows it
    folder.mkdir(parents=True)
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, folder / "model.pt")
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder / "model.pt", folder / "tokenizer.json"


def register_files(config: FoundryConfig, name: str, files: tuple[Path, Path]) -> str:
    """A version of `name` logged and published as the pipeline does, champion: `models:/NAME/VERSION`."""
    from foundry.registry import versions
    from foundry.runtime import tracking
    from foundry.serving.package import log_model

    run_id = tracking.start_pipeline_run(config, run_name=f"seed-{name}")
    uri = log_model(run_id, *files)
    return f"models:/{name}/{versions.publish(uri, name, run_id, {}, True, 'seeded for the test').version}"


def word_soup_source(root: Path, folders: tuple[str, ...] = ("alpha", "beta", ""), n: int = 36) -> Path:
    """`n` word-soup documents spread over top-level `folders` of `root` ("" is the root itself)."""
    from synthetic import synthetic_docs

    for i, text in enumerate(synthetic_docs(n, seed=3)):
        folder = root / folders[i % len(folders)]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"doc{i:02d}.txt").write_text(text)
    return root


# --- purge: Prefect artifacts (for a slow test that runs under `prefect_harness`) ------------------------------


def prefect_artifacts_scrubbed(home: Path) -> None:
    """Under a Prefect API (`prefect_harness`): a markdown and a table artifact holding a canary are found by
    `purge_home.scan` and rewritten through the API by `scrub` (the line dropped, the cell "[purged]"), an
    artifact without it is left as it was, and a second scan finds nothing."""
    import json

    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.client.orchestration import get_client

    from foundry.purge import artifacts as purge_artifacts
    from foundry.purge import home as purge_home
    from foundry.purge.plan import Criterion

    canary = "quokka marmalade prefect"
    needles = purge_artifacts.Needles(Criterion(kind="match", value=canary), {}, set())
    ids = {
        "markdown": create_markdown_artifact(f"# summary\nkept\nthe {canary}\n", key="purge-md", _sync=True),
        "table": create_table_artifact([{"a": "x", "b": f"the {canary}"}], key="purge-table", _sync=True),
        "clean": create_markdown_artifact("# nothing here\n", key="purge-clean", _sync=True),
    }
    hits = purge_home.scan(home, needles)
    assert {h.where for h in hits} >= {str(ids["markdown"]), str(ids["table"])}
    assert str(ids["clean"]) not in {h.where for h in hits}
    assert purge_home.scrub(home, needles, hits)["prefect artifact"] == len(hits)
    with get_client(sync_client=True) as client:
        data = {str(a.id): a.data for a in client.read_artifacts()}
    assert data[str(ids["markdown"])] == "# summary\nkept\n"
    assert data[str(ids["table"])] == json.dumps([{"a": "x", "b": "[purged]"}])
    assert data[str(ids["clean"])] == "# nothing here\n"
    assert purge_home.scan(home, needles) == []


# --- image classifiers: a tiny image dataset and a classifier that is right by construction ---------------

BRIGHTNESS = {"dark": 10, "mid": 128, "bright": 245}  # label -> pixel level of its 8x8 gray images


def gray_png(path: Path, level: int, seed: int, size: int = 8) -> Path:
    """An 8x8 gray PNG near `level` (noise of +-6 levels, from `seed`)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = np.clip(level + rng.integers(-6, 7, (size, size)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def image_shards(folder: Path, counts: dict[str, dict[str, int]]) -> Path:
    """A prepared image dataset's shards in `folder`: counts {split: {label: images}} of BRIGHTNESS's labels."""
    from foundry.vision.shards import ImageRecord, write_shards

    staged = folder / "staged"
    staged.mkdir(parents=True)
    records, seed = [], 0
    for split, labels in counts.items():
        for label, n in labels.items():
            for _ in range(n):
                seed += 1
                path = gray_png(staged / f"{seed}.png", BRIGHTNESS[label], seed)
                records.append(ImageRecord(str(path), label, split))
    write_shards(records, folder / "data", classes=list(BRIGHTNESS))
    return folder / "data"


def brightness_classifier(path: Path, perfect: bool = True, seed: int = 0) -> Path:
    """An image classifier's model.pt for BRIGHTNESS's classes (8x8 gray, resize). `perfect`: one 1x1 conv
    channel that passes the normalised pixels, BN shifting them to [0, 2], mean pooling, and a head whose logits
    2*c*m - c*c pick the nearest of the levels c = 0, 1, 2: right on every image. Else random weights."""
    import torch

    from models.vision import ImageClassifier, VisionConfig

    torch.manual_seed(seed)
    cfg = VisionConfig(num_classes=3, in_channels=1, image_size=8, widths=(1,) if perfect else (4, 8))
    model = ImageClassifier(cfg).eval()
    if perfect:
        conv, bn, head = model.net.features[0], model.net.features[1], model.net.head
        with torch.no_grad():
            conv.weight.zero_()
            conv.weight[0, 0, 1, 1] = 1.0
            bn.running_mean.zero_(), bn.running_var.fill_(1.0 - bn.eps), bn.weight.fill_(1.0), bn.bias.fill_(1.0)
            head.weight.copy_(torch.tensor([[0.0], [2.0], [4.0]]))
            head.bias.copy_(torch.tensor([0.0, -1.0, -4.0]))
    torch.save(
        {
            "modality": "image",
            "model_args": cfg.to_dict(),
            "state_dict": model.state_dict(),
            "classes": list(BRIGHTNESS),
            "image": {"size": 8, "channels": "gray", "mode": "resize"},
        },
        path,
    )
    return path
