"""`foundry export --format hf`: the exported folder opens in `transformers` (offline) and computes what Foundry
computes. Tiny random-weight models (no training) of each kind a registry holds: learned positions (GPT-2's
layout), rotary (GPT-NeoX's), LoRA-merged, aligned (a chat template; its Jinja twin gives the same token ids).
Parity: logits within 1e-4 in float32, and greedy generation of 32 tokens identical, for several short prompts and
a held-out text of a whole context (block_size tokens: every position's logits, and generation up to the last
position). The registry path runs against the session's embedded MLflow: the export is logged, tagged and then
reused, and written again when what the tag names is not this exporter's artifact."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from helpers_export import EXPORT_CORPUS, corpus_tokenizer, sharp_gpt
from helpers_registry import new_run

from foundry.export import FORMAT_VERSION
from foundry.export.hf import FILES, write_hf
from foundry.export.layout import KNOWN_ARGS, OFF_ARGS, UnsupportedArchitecture, hf_module_name, qkv_rows, target
from foundry.export.publish import MARKER, ExportRefused, export_version
from models.chat import ChatTemplate
from models.gpt import GPT, GPTConfig
from models.lora import LoRASpec, add_lora, merge_lora

os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"  # never download

# Text the tokenizer was not trained on, long enough for a whole context (block_size 128 tokens)
HELD_OUT = (
    "The mill carried three stones and the water fell: 12 and 345. Café façade, 北京 river light. "
    "def light(stone):\n\treturn stone * 6789  # naïve émigré\n"
    "Four and five: nine; the old river, 東京 and the water past the mill. "
)
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


def held_out(tokenizer, block_size: int = 128) -> list[int]:
    ids = tokenizer.encode(HELD_OUT * 4).ids[:block_size]
    assert len(ids) == block_size
    return ids


def export(tmp_path, model: GPT, tokenizer_path, template: ChatTemplate | None = None):
    from transformers import AutoModelForCausalLM

    saved = {"model_args": model.config.to_dict(), "state_dict": model.state_dict()}
    if template is not None:
        saved["chat_template"] = template.to_dict()
    out = write_hf(saved, tokenizer_path, tmp_path / "hf")
    return AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval(), out


def assert_parity(model: GPT, hf, prompts_ids: list[list[int]], stop: int, long: list[int]) -> None:
    """Logits and greedy generation on each prompt and on `long`, a whole context: logits at every one of its
    positions, generation from its first block_size - 32 tokens up to the last position."""
    for ids in [*prompts_ids, long]:
        x = torch.tensor([ids])
        with torch.no_grad():
            ours, theirs = model(x)[0], hf(x).logits
        assert (ours - theirs).abs().max().item() < 1e-4
        x = x[:, : model.config.block_size - 32]
        ours = model.generate(x, 32, top_k=1, stop_token=stop)[0].tolist()
        theirs = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=32, do_sample=False)[0].tolist()
        assert theirs == ours


@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_base_models_compute_what_foundry_computes(tmp_path, positions):
    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json")
    model = sharp_gpt(tokenizer.get_vocab_size(), positions)
    hf, out = export(tmp_path, model, tmp_path / "tokenizer.json")
    assert type(hf).__name__ == {"learned": "GPT2LMHeadModel", "rotary": "GPTNeoXForCausalLM"}[positions]
    stop = tokenizer.token_to_id("<|endoftext|>")
    assert_parity(model, hf, [tokenizer.encode(p).ids for p in PROMPTS], stop, held_out(tokenizer))


def test_rotary_settings_are_written_for_transformers_4_readers_too(tmp_path):
    """transformers 5 reads `rope_parameters`; 4.x and vLLM read `rotary_pct` and `rotary_emb_base` and, without
    them, rotate a quarter of each head. The parity test above checks 5.24 reads the config with both."""
    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json")
    _, out = export(tmp_path, sharp_gpt(tokenizer.get_vocab_size(), "rotary"), tmp_path / "tokenizer.json")
    config = json.loads((out / "config.json").read_text())
    assert (config["rotary_pct"], config["rotary_emb_base"], config["rope_parameters"]) == (
        1.0,
        10000.0,
        {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
    )


def test_every_model_arg_is_one_the_mappings_handle():
    """Adding a field to GPTConfig fails here until the exporter maps it (or refuses it) and KNOWN_ARGS says so."""
    assert set(GPTConfig.__dataclass_fields__) == KNOWN_ARGS | set(OFF_ARGS)


def test_a_model_saved_before_the_bigram_qk_norm_activation_and_value_fields_still_maps():
    args = GPTConfig(vocab_size=300, positions="rotary").to_dict()
    for field in ("bigram_buckets", "qk_norm", "mlp_activation", "value_embeddings", "mtp_depth", "mtp_weight"):
        del args[field]
    assert target(args) == "gpt_neox"
    assert GPTConfig(**args) == GPTConfig(vocab_size=300, positions="rotary")  # read as off


def test_a_lora_merged_model_computes_what_foundry_computes(tmp_path):
    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json")
    model = sharp_gpt(tokenizer.get_vocab_size(), "rotary", seed=1)
    add_lora(model, LoRASpec(rank=4, alpha=8.0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_b"):
                p.copy_(0.2 * torch.randn_like(p))
    merged = merge_lora(model).eval()
    hf, _ = export(tmp_path, merged, tmp_path / "tokenizer.json")
    stop = tokenizer.token_to_id("<|endoftext|>")
    assert_parity(merged, hf, [tokenizer.encode(p).ids for p in PROMPTS], stop, held_out(tokenizer))


def test_an_aligned_model_chats_as_foundry_does(tmp_path):
    from transformers import AutoTokenizer

    template = ChatTemplate()
    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json", chat=True)
    model = sharp_gpt(tokenizer.get_vocab_size(), "learned", seed=2)
    hf, out = export(tmp_path, model, tmp_path / "tokenizer.json", template)
    theirs = AutoTokenizer.from_pretrained(out)
    prompts = []
    for chat in CHATS:
        for generation_prompt in (False, True):
            ids = theirs.apply_chat_template(chat, add_generation_prompt=generation_prompt, return_dict=False)
            ours = template.encode_prompt(tokenizer, chat) if generation_prompt else template.encode(tokenizer, chat)[0]
            assert list(ids) == ours
        prompts.append(template.encode_prompt(tokenizer, chat))
    assert_parity(model, hf, prompts, template.token_id(tokenizer, template.end), held_out(tokenizer))


@pytest.mark.parametrize(
    "bad",
    [
        [{"role": "tool", "content": "x"}],
        [{"role": "user", "content": "a <|end|> inside"}],
        [{"role": "user", "content": "a<|endoftext|>b"}],
    ],
)
def test_the_jinja_template_refuses_what_foundrys_refuses(tmp_path, bad):
    from transformers import AutoTokenizer

    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json", chat=True)
    _, out = export(
        tmp_path, sharp_gpt(tokenizer.get_vocab_size(), "learned"), tmp_path / "tokenizer.json", ChatTemplate()
    )
    with pytest.raises(Exception, match="unknown role|template marker"):
        AutoTokenizer.from_pretrained(out).apply_chat_template(bad)


def test_user_text_with_special_token_strings_encodes_in_hf_as_foundry_serves_it(tmp_path):
    """docs/serving.md's recipe: each content tokenized with `split_special_tokens=True` between the markers' ids
    gives the ids Foundry's served model encodes (`text_only`); the rendered chat cannot (its markers would split)."""
    from transformers import AutoTokenizer

    from models.tokens import text_only

    template = ChatTemplate()
    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json", chat=True)
    _, out = export(tmp_path, sharp_gpt(tokenizer.get_vocab_size(), "learned"), tmp_path / "tokenizer.json", template)
    theirs = AutoTokenizer.from_pretrained(out)
    chat = [{"role": "system", "content": "be <|user|> brief"}, {"role": "user", "content": "a<|endoftext|>b<|end|>"}]
    ids = []
    for message in chat:
        content = theirs(" " + message["content"], add_special_tokens=False, split_special_tokens=True)["input_ids"]
        ids += [theirs.convert_tokens_to_ids(template.marker(message["role"])), *content]
        ids.append(theirs.convert_tokens_to_ids(template.end))
    ids.append(theirs.convert_tokens_to_ids(template.assistant))
    assert ids == template.encode_prompt(text_only(tokenizer), chat)
    split = theirs("<|user|> a<|end|>", add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert theirs.convert_tokens_to_ids(template.user) not in split  # why the rendered chat cannot take the flag


def test_the_exported_tokenizer_gives_foundrys_ids(tmp_path):
    from transformers import AutoTokenizer

    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json", chat=True)
    _, out = export(tmp_path, sharp_gpt(tokenizer.get_vocab_size(), "learned"), tmp_path / "tokenizer.json")
    theirs = AutoTokenizer.from_pretrained(out)
    texts = [*EXPORT_CORPUS[:4], " leading space", "<|user|> hi<|end|><|endoftext|>", "émigré\n\n\ttabs", ""]
    assert [theirs(t).input_ids for t in texts] == [tokenizer.encode(t).ids for t in texts]
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert (config["eos_token"], config["model_max_length"], "chat_template" in config) == ("<|endoftext|>", 128, False)


@pytest.mark.parametrize(
    "args, reason",
    [
        ({"positions": "alibi"}, "positions 'alibi'"),
        ({"bias": False}, r"model args \['bias'\]"),
        ({"bigram_buckets": 64}, r"what \['bigram_buckets'\] add"),
        ({"qk_norm": True, "mlp_activation": "relu2"}, r"what \['mlp_activation', 'qk_norm'\] add"),
        ({"value_embeddings": True}, r"what \['value_embeddings'\] add"),
        ({"mtp_depth": 1}, r"what \['mtp_depth'\] add"),
    ],
)
def test_architectures_without_a_faithful_mapping_are_refused(tmp_path, args, reason):
    corpus_tokenizer(tmp_path / "tokenizer.json")
    model = sharp_gpt(400, "learned")
    saved = {"model_args": {**model.config.to_dict(), **args}, "state_dict": model.state_dict()}
    with pytest.raises(UnsupportedArchitecture, match=reason):
        write_hf(saved, tmp_path / "tokenizer.json", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_an_unmerged_adapter_is_refused(tmp_path):
    corpus_tokenizer(tmp_path / "tokenizer.json")
    model = sharp_gpt(400, "rotary")
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

    tokenizer = corpus_tokenizer(tmp_path / "tokenizer.json")
    model = sharp_gpt(tokenizer.get_vocab_size(), "rotary")
    torch.save({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, tmp_path / "model.pt")
    run_id = new_run("export")
    uri = log_model(run_id, tmp_path / "model.pt", tmp_path / "tokenizer.json")
    name = f"export-{tmp_path.name}"
    return f"models:/{name}/{register(uri, name, run_id, {})}"


def _on_disk(run_id: str, artifact: str):
    """The folder of a run's artifact in the session's local artifact store."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    from foundry.runtime import tracking

    return Path(url2pathname(urlparse(tracking.client().get_run(run_id).info.artifact_uri).path)) / artifact


def test_an_export_is_attached_to_its_version_and_reused(tmp_path, registered):
    from foundry.cli import main
    from foundry.registry.versions import resolve
    from foundry.runtime import tracking

    home = tmp_path / "home"
    first = export_version(registered, "hf", tmp_path / "first", home)
    version = resolve(registered)
    folder = f"{version.name}-v{version.version}"
    assert version.tags["foundry.export.hf"] == first.artifact == f"export/hf/{folder}/format-{FORMAT_VERSION}"
    logged = {f.path.rsplit("/", 1)[-1] for f in tracking.client().list_artifacts(version.run_id, first.artifact)}
    assert logged == set(FILES)
    # a file only the logged artifact holds: it reaches --out only if the export is downloaded, not written again
    (tmp_path / "sentinel.txt").write_text("from the registry")
    tracking.client().log_artifact(version.run_id, str(tmp_path / "sentinel.txt"), first.artifact)
    again = export_version(registered, "hf", tmp_path / "first", home)
    assert (again.reused, first.reused) == (True, False)
    assert (tmp_path / "first" / "sentinel.txt").read_text() == "from the registry"
    marker = json.loads((tmp_path / "first" / MARKER).read_text())
    assert (marker["model_uri"], marker["format_version"]) == (registered, FORMAT_VERSION)
    assert main(["export", registered, "--format", "hf", "--out", str(tmp_path / "cli")]) == 0


def test_a_reregistered_version_gets_an_export_of_its_own(tmp_path, registered):
    """reregister copies a version's tags but not its export tags, which name the original run's artifacts."""
    from foundry.registry.versions import reregister, resolve

    export_version(registered, "hf", tmp_path / "old", tmp_path / "home")
    number = reregister(registered, tmp_path / "home")
    new = resolve(f"models:/{resolve(registered).name}/{number}")
    assert "foundry.export.hf" not in new.tags
    done = export_version(f"models:/{new.name}/{new.version}", "hf", tmp_path / "new", tmp_path / "home")
    assert (done.reused, done.run_id, done.artifact) == (
        False,
        new.run_id,
        f"export/hf/{new.name}-v{new.version}/format-{FORMAT_VERSION}",
    )
    assert resolve(f"models:/{new.name}/{new.version}").tags["foundry.export.hf"] == done.artifact


def test_an_export_whose_artifact_was_deleted_is_written_again(tmp_path, registered):
    from foundry.core.fs import remove_tree

    first = export_version(registered, "hf", tmp_path / "first", tmp_path / "home")
    remove_tree(_on_disk(first.run_id, first.artifact), within=_on_disk(first.run_id, "export"))
    again = export_version(registered, "hf", tmp_path / "again", tmp_path / "home")
    assert not again.reused and (tmp_path / "again" / "model.safetensors").is_file()
    assert (_on_disk(first.run_id, first.artifact) / "model.safetensors").is_file()  # attached again


def test_an_export_by_an_older_exporter_is_written_again(tmp_path, registered):
    """A tag as the first exporter wrote it (`export/hf/NAME-vN`, format 1): its files miss later fixes."""
    from foundry.registry.versions import resolve
    from foundry.runtime import tracking

    version = resolve(registered)
    old = f"export/hf/{version.name}-v{version.version}"
    (tmp_path / "sentinel.txt").write_text("format 1")
    tracking.client().log_artifact(version.run_id, str(tmp_path / "sentinel.txt"), old)
    tracking.client().set_model_version_tag(version.name, version.version, "foundry.export.hf", old)
    done = export_version(registered, "hf", tmp_path / "out", tmp_path / "home")
    assert not done.reused and not (tmp_path / "out" / "sentinel.txt").exists()
    assert resolve(registered).tags["foundry.export.hf"] == done.artifact != old


def test_an_artifact_listing_that_fails_stops_the_export(tmp_path, registered):
    """Only an empty listing means the export is gone: an error listing it is not taken for absence."""
    first = export_version(registered, "hf", tmp_path / "first", tmp_path / "home")
    (_on_disk(first.run_id, first.artifact) / "dangling").symlink_to(tmp_path / "nowhere")  # the listing stats it
    with pytest.raises(OSError):
        export_version(registered, "hf", tmp_path / "again", tmp_path / "home")
    assert not (tmp_path / "again").exists()


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
