"""The GGUF export run by llama.cpp itself (llama-cpp-python 0.3.36, built from source: the slow lane for its
build, not its run time): on held-out text its log-likelihood is Foundry's within 0.1% (1e-5 measured:
llama.cpp's tanh GELU is the difference), and its tokenizer gives Foundry's token ids. Tiny random-weight models with
weights large enough that the predictions are sharp (a wrong mapping moves the log-likelihood by far more)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from foundry.config.training import TokenizerConfig
from foundry.data.shards import train_tokenizer
from foundry.export.gguf import write_gguf
from models.gpt import GPT, GPTConfig

CORPUS = [
    "The river carried the stone past the old mill, and the light fell on the water.",
    "Add two and three: five. Add four and four: eight. Numbers 12, 345 and 6789 too.",
    "def main():\n    return sum(range(10))  # tabs\tand spaces",
    "Ünïcödé text, émigré café, naïve façade; 東京 and 北京.",
] * 30
HELD_OUT = "The mill carried three stones and the water fell: 12 and 345. Café façade, 北京 river light.<|endoftext|>"


def _sharp_gpt(vocab_size: int, positions: str) -> GPT:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size, block_size=128, n_layer=2, n_head=4, n_embd=32, positions=positions))
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm_gain = ".ln_" in name and name.endswith("weight")
            p.copy_(1 + 0.1 * torch.randn_like(p) if norm_gain else 0.3 * torch.randn_like(p))
    return model.eval()


def _nll(logits: np.ndarray, ids: list[int]) -> float:
    """Summed negative log-likelihood of each next token under (T, V) logits."""
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-logp[np.arange(len(ids) - 1), ids[1:]].sum())


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer = train_tokenizer(CORPUS, TokenizerConfig(vocab_size=400, min_frequency=1))
    tokenizer.save(str(path))
    return tokenizer, path


def _llama(path):
    from llama_cpp import Llama

    return Llama(str(path), n_ctx=128, logits_all=True, verbose=False, n_threads=1)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_llama_cpp_log_likelihood_is_foundrys_within_a_tenth_of_a_percent(tmp_path, tokenizer, positions, dtype):
    tok, path = tokenizer
    model = _sharp_gpt(tok.get_vocab_size(), positions)
    saved = {"model_args": model.config.to_dict(), "state_dict": model.state_dict()}
    llm = _llama(write_gguf(saved, path, tmp_path, dtype=dtype))
    ids = tok.encode(HELD_OUT).ids
    llm.eval(ids)
    with torch.no_grad():
        ours = _nll(model(torch.tensor([ids]))[0][0].double().numpy(), ids)
    theirs = _nll(np.asarray(llm.scores[: len(ids)], dtype=np.float64), ids)
    # #25 asks for 1%; a tenth of that, as a wrong mapping moves a tiny model's total little (parallel residual
    # on: 1.9%); measured 1e-5 (f32) and 3e-5 (f16)
    assert abs(theirs - ours) / ours < 0.001


def test_llama_cpp_tokenizes_as_foundry(tmp_path, tokenizer):
    tok, path = tokenizer
    model = _sharp_gpt(tok.get_vocab_size(), "learned")
    llm = _llama(write_gguf({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, path, tmp_path))
    assert llm.tokenize(HELD_OUT.encode(), add_bos=False, special=True) == tok.encode(HELD_OUT).ids
