"""`foundry export --format gguf`'s file, read back with gguf's own reader: every tensor and the metadata."""

import json

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFReader, TokenType
from helpers_tokenizers import plain_tokenizer, tiny_tokenizer

from foundry.export.gguf import gguf_name, write_gguf
from foundry.export.hf import jinja_template
from foundry.export.layout import UnsupportedArchitecture
from models.chat import ChatTemplate
from models.gpt import GPT, GPTConfig


def _saved(positions: str, vocab_size: int, **extra) -> dict:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab_size, block_size=24, n_layer=2, n_head=2, n_embd=16, positions=positions)
    model = GPT(cfg)
    return {"model_args": cfg.to_dict(), "state_dict": model.state_dict(), **extra}


def _field(reader: GGUFReader, key: str):
    return reader.fields[key].contents()


@pytest.fixture
def tokenizer_file(tmp_path):
    path = tmp_path / "tokenizer.json"
    plain_tokenizer().save(str(path))
    return path


@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_every_tensor_is_foundrys_under_llama_cpps_name(tmp_path, tokenizer_file, positions):
    saved = _saved(positions, 300)
    reader = GGUFReader(write_gguf(saved, tokenizer_file, tmp_path / "out"))
    read = {t.name: t for t in reader.tensors}
    expected = {gguf_name(k): v.numpy() for k, v in saved["state_dict"].items()}
    assert set(read) == set(expected)
    for name, value in expected.items():
        assert read[name].tensor_type == GGMLQuantizationType.F32, name
        np.testing.assert_array_equal(np.asarray(read[name].data).reshape(value.shape), value, err_msg=name)
        # gguf lists dimensions innermost first: a (out, in) matrix is ne = (in, out)
        assert tuple(int(d) for d in read[name].shape) == tuple(reversed(value.shape)), name


COMMON = {
    "context_length": 24,
    "embedding_length": 16,
    "block_count": 2,
    "feed_forward_length": 64,
    "attention.head_count": 2,
    "attention.layer_norm_epsilon": 1e-5,
    "vocab_size": 300,
}
# every model key the writer sets, per architecture: rotary is sequential gptneox roping the whole head
METADATA = {
    "learned": ("gpt2", COMMON),
    "rotary": (
        "gptneox",
        COMMON | {"rope.dimension_count": 8, "rope.freq_base": 10000.0, "use_parallel_residual": False},
    ),
}


@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_the_hyperparameters_are_the_models(tmp_path, tokenizer_file, positions):
    reader = GGUFReader(write_gguf(_saved(positions, 300), tokenizer_file, tmp_path, source="models:/m/3"))
    arch, expected = METADATA[positions]
    written = {k.removeprefix(f"{arch}."): _field(reader, k) for k in reader.fields if k.startswith(f"{arch}.")}
    assert written == pytest.approx(expected)
    general = {k: _field(reader, k) for k in reader.fields if k.startswith("general.")}
    assert general == {"general.architecture": arch, "general.name": "models:/m/3", "general.file_type": 0}
    assert ("position_embd.weight" in {t.name for t in reader.tensors}) == (positions == "learned")


def test_tokenizer_is_embedded_whole(tmp_path, tokenizer_file):
    reader = GGUFReader(write_gguf(_saved("learned", 300), tokenizer_file, tmp_path))
    spec = json.loads(tokenizer_file.read_text())
    vocab = spec["model"]["vocab"] | {t["content"]: t["id"] for t in spec["added_tokens"]}
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert [tokens[i] for i in vocab.values()] == list(vocab) and len(tokens) == 300
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    assert _field(reader, "tokenizer.ggml.merges") == merges and merges
    assert _field(reader, "tokenizer.ggml.model") == "gpt2" and _field(reader, "tokenizer.ggml.pre") == "gpt-2"
    eos = vocab["<|endoftext|>"]
    assert (_field(reader, "tokenizer.ggml.eos_token_id"), _field(reader, "tokenizer.ggml.bos_token_id")) == (eos, eos)
    assert _field(reader, "tokenizer.ggml.token_type")[eos] == TokenType.CONTROL


def test_aligned_model_carries_its_template_and_stops_at_its_end_marker(tmp_path):
    tokenizer = tiny_tokenizer(tmp_path / "tokenizer.json")
    saved = _saved("learned", tokenizer.get_vocab_size(), chat_template=ChatTemplate().to_dict())
    reader = GGUFReader(write_gguf(saved, tmp_path / "tokenizer.json", tmp_path))
    types = _field(reader, "tokenizer.ggml.token_type")
    assert {types[tokenizer.token_to_id(m)] for m in ("<|user|>", "<|assistant|>", "<|end|>")} == {TokenType.CONTROL}
    assert _field(reader, "tokenizer.chat_template") == jinja_template(ChatTemplate())
    assert _field(reader, "tokenizer.ggml.eos_token_id") == tokenizer.token_to_id("<|end|>")


def test_base_model_has_no_chat_template(tmp_path, tokenizer_file):
    reader = GGUFReader(write_gguf(_saved("learned", 300), tokenizer_file, tmp_path))
    assert "tokenizer.chat_template" not in reader.fields


def test_ids_past_the_tokenizer_are_unused_padding(tmp_path, tokenizer_file):
    reader = GGUFReader(write_gguf(_saved("learned", 304), tokenizer_file, tmp_path))
    assert _field(reader, "tokenizer.ggml.token_type")[300:] == [TokenType.UNUSED] * 4


def test_f16_halves_matrices_and_keeps_norms_f32(tmp_path, tokenizer_file):
    reader = GGUFReader(write_gguf(_saved("rotary", 300), tokenizer_file, tmp_path, dtype="f16"))
    kinds = {t.name: t.tensor_type for t in reader.tensors}
    assert (kinds["blk.0.attn_qkv.weight"], kinds["blk.0.attn_norm.weight"]) == (
        GGMLQuantizationType.F16,
        GGMLQuantizationType.F32,
    )


def test_unmerged_adapter_is_refused_naming_it(tmp_path, tokenizer_file):
    saved = _saved("learned", 300)
    saved["state_dict"]["blocks.0.attn.qkv.lora_a"] = torch.zeros(4, 16)
    with pytest.raises(UnsupportedArchitecture, match="lora_a"):
        write_gguf(saved, tokenizer_file, tmp_path)
    assert not (tmp_path / "model.gguf").exists()


@pytest.mark.parametrize(
    "field, value",
    [
        ("bigram_buckets", 64),
        ("qk_norm", True),
        ("mlp_activation", "relu2"),
        ("value_embeddings", True),
        ("mtp_depth", 1),
    ],
)
def test_a_bigram_table_qk_norm_relu2_value_embeddings_or_predictions_ahead_are_refused(
    tmp_path, tokenizer_file, field, value
):
    saved = _saved("learned", 300)
    saved["model_args"][field] = value
    with pytest.raises(UnsupportedArchitecture, match=field):
        write_gguf(saved, tokenizer_file, tmp_path)
    assert not (tmp_path / "model.gguf").exists()


def test_unknown_architecture_is_refused(tmp_path, tokenizer_file):
    saved = _saved("learned", 300)
    saved["model_args"]["positions"] = "alibi"
    with pytest.raises(UnsupportedArchitecture, match="alibi"):
        write_gguf(saved, tokenizer_file, tmp_path)
