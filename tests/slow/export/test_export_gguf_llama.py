"""The GGUF export run by llama.cpp itself (llama-cpp-python 0.3.36, built from source: the slow lane for its
build, not its run time): on held-out text its log-likelihood is Foundry's within 0.1% (1e-5 measured:
llama.cpp's tanh GELU is the difference), and its tokenizer gives Foundry's token ids. Tiny random-weight models with
weights large enough that the predictions are sharp (a wrong mapping moves the log-likelihood by far more)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers_export import corpus_tokenizer, sharp_gpt

from foundry.export.gguf import write_gguf

HELD_OUT = "The mill carried three stones and the water fell: 12 and 345. Café façade, 北京 river light.<|endoftext|>"


def _nll(logits: np.ndarray, ids: list[int]) -> float:
    """Summed negative log-likelihood of each next token under (T, V) logits."""
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return float(-logp[np.arange(len(ids) - 1), ids[1:]].sum())


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    return corpus_tokenizer(path), path


def _llama(path):
    from llama_cpp import Llama

    return Llama(str(path), n_ctx=128, logits_all=True, verbose=False, n_threads=1)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_llama_cpp_log_likelihood_is_foundrys_within_a_tenth_of_a_percent(tmp_path, tokenizer, positions, dtype):
    tok, path = tokenizer
    model = sharp_gpt(tok.get_vocab_size(), positions)
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
    model = sharp_gpt(tok.get_vocab_size(), "learned")
    llm = _llama(write_gguf({"model_args": model.config.to_dict(), "state_dict": model.state_dict()}, path, tmp_path))
    assert llm.tokenize(HELD_OUT.encode(), add_bos=False, special=True) == tok.encode(HELD_OUT).ids
