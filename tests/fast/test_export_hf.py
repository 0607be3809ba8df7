"""`foundry export --format hf`: the exported folder opens in `transformers` (offline) and computes what Foundry
computes. Tiny random-weight models (no training) of each kind a registry holds: learned positions (GPT-2's
layout), rotary (GPT-NeoX's), LoRA-merged, aligned (a chat template; its Jinja twin gives the same token ids).
Parity: logits within 1e-4 in float32, and greedy generation of 32 tokens identical, for several prompts. The
registry path runs against the session's embedded MLflow: the export is logged, tagged and then reused."""

from __future__ import annotations

import json
import os

import pytest
import torch
from helpers import new_run

from foundry.config.training import TokenizerConfig
from foundry.data.shards import train_tokenizer
from foundry.export.hf import write_hf
from foundry.export.layout import UnsupportedArchitecture, hf_module_name, qkv_rows
from foundry.export.publish import MARKER, ExportRefused, export_version
from models.chat import ChatTemplate, add_chat_tokens
from models.gpt import GPT, GPTConfig
from models.lora import LoRASpec, add_lora, merge_lora

os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"  # never download

CORPUS = [
    "The river carried the stone past the old mill, and the light fell on the water.",
    "Add two and three: five. Add four and four: eight. Numbers 12, 345 and 6789 too.",
    "def main():\n    return sum(range(10))  # tabs\tand spaces",
    "Ünïcödé text, émigré café, naïve façade; 東京 and 北京.",
] * 30
PROMPTS = ["The river", "Add two and three:", "def main():", " café 東京"]
CHATS = [
    [{"role": "user", "content": "Add two and three."}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the river?"},
        {"role": "assistant", "content": " It carries the stone."},
        {"role": "user", "content": "café 東京 and\nmore"},
    ],
]


def tokenizer_file(path, chat: bool = False):
    """A byte-level BPE trained as Foundry trains one (`train_tokenizer`), with the chat markers when `chat`."""
    tokenizer = train_tokenizer(CORPUS, TokenizerConfig(vocab_size=400, min_frequency=1))
    if chat:
        add_chat_tokens(tokenizer, ChatTemplate())
    tokenizer.save(str(path))
    return tokenizer


def random_gpt(vocab_size: int, positions: str, seed: int = 0) -> GPT:
    """Weights large enough that the next token is never a near tie, so greedy decoding is a sharp test."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size, block_size=128, n_layer=2, n_head=4, n_embd=32, positions=positions))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(
                1 + 0.1 * torch.randn_like(p)
                if ".ln_" in name and name.endswith("weight")
                else 0.3 * torch.randn_like(p)
            )
    return model.eval()


def export(tmp_path, model: GPT, tokenizer_path, template: ChatTemplate | None = None):
    from transformers import AutoModelForCausalLM

    saved = {"model_args": model.config.to_dict(), "state_dict": model.state_dict()}
    if template is not None:
        saved["chat_template"] = template.to_dict()
    out = write_hf(saved, tokenizer_path, tmp_path / "hf")
    return AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval(), out


def assert_parity(model: GPT, hf, prompts_ids: list[list[int]], stop: int) -> None:
    for ids in prompts_ids:
        x = torch.tensor([ids])
        with torch.no_grad():
            ours, theirs = model(x)[0], hf(x).logits
        assert (ours - theirs).abs().max().item() < 1e-4
        ours = model.generate(x, 32, top_k=1, stop_token=stop)[0].tolist()
        theirs = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=32, do_sample=False)[0].tolist()
        assert theirs == ours


@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_base_models_compute_what_foundry_computes(tmp_path, positions):
    tokenizer = tokenizer_file(tmp_path / "tokenizer.json")
    model = random_gpt(tokenizer.get_vocab_size(), positions)
    hf, out = export(tmp_path, model, tmp_path / "tokenizer.json")
    assert type(hf).__name__ == {"learned": "GPT2LMHeadModel", "rotary": "GPTNeoXForCausalLM"}[positions]
    assert_parity(model, hf, [tokenizer.encode(p).ids for p in PROMPTS], tokenizer.token_to_id("<|endoftext|>"))


def test_a_lora_merged_model_computes_what_foundry_computes(tmp_path):
    tokenizer = tokenizer_file(tmp_path / "tokenizer.json")
    model = random_gpt(tokenizer.get_vocab_size(), "rotary", seed=1)
    add_lora(model, LoRASpec(rank=4, alpha=8.0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_b"):
                p.copy_(0.2 * torch.randn_like(p))
    merged = merge_lora(model).eval()
    hf, _ = export(tmp_path, merged, tmp_path / "tokenizer.json")
    assert_parity(merged, hf, [tokenizer.encode(p).ids for p in PROMPTS], tokenizer.token_to_id("<|endoftext|>"))


def test_an_aligned_model_chats_as_foundry_does(tmp_path):
    from transformers import AutoTokenizer

    template = ChatTemplate()
    tokenizer = tokenizer_file(tmp_path / "tokenizer.json", chat=True)
    model = random_gpt(tokenizer.get_vocab_size(), "learned", seed=2)
    hf, out = export(tmp_path, model, tmp_path / "tokenizer.json", template)
    theirs = AutoTokenizer.from_pretrained(out)
    prompts = []
    for chat in CHATS:
        for generation_prompt in (False, True):
            ids = theirs.apply_chat_template(chat, add_generation_prompt=generation_prompt, return_dict=False)
            ours = template.encode_prompt(tokenizer, chat) if generation_prompt else template.encode(tokenizer, chat)[0]
            assert list(ids) == ours
        prompts.append(template.encode_prompt(tokenizer, chat))
    assert_parity(model, hf, prompts, template.token_id(tokenizer, template.end))


@pytest.mark.parametrize("bad", [[{"role": "tool", "content": "x"}], [{"role": "user", "content": "a <|end|> inside"}]])
def test_the_jinja_template_refuses_what_foundrys_refuses(tmp_path, bad):
    from transformers import AutoTokenizer

    tokenizer = tokenizer_file(tmp_path / "tokenizer.json", chat=True)
    _, out = export(
        tmp_path, random_gpt(tokenizer.get_vocab_size(), "learned"), tmp_path / "tokenizer.json", ChatTemplate()
    )
    with pytest.raises(Exception, match="unknown role|template marker"):
        AutoTokenizer.from_pretrained(out).apply_chat_template(bad)


def test_the_exported_tokenizer_gives_foundrys_ids(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = tokenizer_file(tmp_path / "tokenizer.json", chat=True)
    _, out = export(tmp_path, random_gpt(tokenizer.get_vocab_size(), "learned"), tmp_path / "tokenizer.json")
    theirs = AutoTokenizer.from_pretrained(out)
    texts = [*CORPUS[:4], " leading space", "<|user|> hi<|end|><|endoftext|>", "émigré\n\n\ttabs", ""]
    assert [theirs(t).input_ids for t in texts] == [tokenizer.encode(t).ids for t in texts]
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert (config["eos_token"], config["model_max_length"], "chat_template" in config) == ("<|endoftext|>", 128, False)


@pytest.mark.parametrize(
    "args, reason",
    [
        ({"positions": "alibi"}, "positions 'alibi'"),
        ({"bias": False}, r"model args \['bias'\]"),
    ],
)
def test_architectures_without_a_faithful_mapping_are_refused(tmp_path, args, reason):
    tokenizer_file(tmp_path / "tokenizer.json")
    model = random_gpt(400, "learned")
    saved = {"model_args": {**model.config.to_dict(), **args}, "state_dict": model.state_dict()}
    with pytest.raises(UnsupportedArchitecture, match=reason):
        write_hf(saved, tmp_path / "tokenizer.json", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_an_unmerged_adapter_is_refused(tmp_path):
    tokenizer_file(tmp_path / "tokenizer.json")
    model = random_gpt(400, "rotary")
    add_lora(model, LoRASpec(rank=2))
    saved = {"model_args": model.config.to_dict(), "state_dict": model.state_dict()}
    with pytest.raises(UnsupportedArchitecture, match="unmerged adapter"):
        write_hf(saved, tmp_path / "tokenizer.json", tmp_path / "hf")


def test_qkv_rows_and_module_names_follow_the_target():
    args = GPTConfig(vocab_size=10, n_head=2, n_embd=4, positions="rotary").to_dict()
    rows = torch.arange(12)  # q: 0-3 (heads of 2), k: 4-7, v: 8-11
    assert qkv_rows(args, rows).tolist() == [0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11]
    assert hf_module_name("blocks.1.attn.qkv", args) == "gpt_neox.layers.1.attention.query_key_value"
    learned = {**args, "positions": "learned"}
    assert qkv_rows(learned, rows).tolist() == list(range(12))
    assert hf_module_name("blocks.1.mlp.fc", learned) == "transformer.h.1.mlp.c_fc"


# --- attached to the registered version ---------------------------------------------------------------------


@pytest.fixture
def registered(tmp_path):
    """A tiny version registered in the session's MLflow as Foundry registers one: a logged pyfunc model."""
    from foundry.registry.versions import register
    from foundry.serving.package import log_model

    tokenizer = tokenizer_file(tmp_path / "tokenizer.json")
    model = random_gpt(tokenizer.get_vocab_size(), "rotary")
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, tmp_path / "model.pt")
    run_id = new_run("export")
    uri = log_model(run_id, tmp_path / "model.pt", tmp_path / "tokenizer.json")
    name = f"export-{tmp_path.name}"
    return f"models:/{name}/{register(uri, name, run_id, {})}"


def test_an_export_is_attached_to_its_version_and_reused(tmp_path, registered):
    from foundry import tracking
    from foundry.cli import main
    from foundry.registry.versions import resolve

    home = tmp_path / "home"
    first = export_version(registered, "hf", tmp_path / "first", home)
    version = resolve(registered)
    assert version.tags["foundry.export.hf"] == first.artifact == f"export/hf/{version.name}-v{version.version}"
    logged = {f.path.rsplit("/", 1)[-1] for f in tracking.client().list_artifacts(version.run_id, first.artifact)}
    assert logged == {
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "README.md",
    }
    (tmp_path / "first" / "model.safetensors").write_bytes(b"not rewritten")  # a rewrite would not come back
    again = export_version(registered, "hf", tmp_path / "first", home)
    assert again.reused and not first.reused
    assert (tmp_path / "first" / "model.safetensors").read_bytes() != b"not rewritten"
    assert json.loads((tmp_path / "first" / MARKER).read_text())["model_uri"] == registered
    assert main(["export", registered, "--format", "hf", "--out", str(tmp_path / "cli")]) == 0


def test_a_folder_no_export_wrote_is_refused(tmp_path, registered):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ExportRefused, match="no export wrote"):
        export_version(registered, "hf", tmp_path / "mine", tmp_path / "home")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_a_version_the_registry_does_not_hold_is_an_error_and_writes_nothing(tmp_path):
    from mlflow.exceptions import MlflowException

    with pytest.raises(MlflowException):
        export_version("models:/no-such-model/1", "hf", tmp_path / "out", tmp_path / "home")
    assert list(tmp_path.iterdir()) == []


def test_gguf_exports_go_through_the_same_attachment(tmp_path, registered):
    from foundry.registry.versions import resolve

    done = export_version(registered, "gguf", tmp_path / "gguf", tmp_path / "home")
    assert (tmp_path / "gguf" / "model.gguf").is_file() and resolve(registered).tags[
        "foundry.export.gguf"
    ] == done.artifact
