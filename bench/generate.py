"""Generation speed: Foundry's served generation against `transformers`' `generate` on the exported copy of the
same weights, and against Foundry's generation before the key/value cache.

    python bench/generate.py [--model models:/foundry-gpt@champion] [--rows 8] [--new-tokens 64] [--repeats 5]
                             [--threads N]

The model is the default config's architecture (`foundry config --defaults`: rotary positions, 2 layers of
width 192 with 3 heads, context 256, vocabulary 4096) with random weights, or with `--model` a registered version (its
`model.pt` and `tokenizer.json`, from the registry under $FOUNDRY_HOME). `foundry.export.hf.write_hf` exports it
to a temporary folder, which `AutoModelForCausalLM.from_pretrained` opens (offline).

Three ways to generate the same greedy tokens for the same `--rows` prompts of mixed lengths (Python standard
library source, cut at different lengths), each `--new-tokens` long:
- Foundry, cached: `models.generate.generate_ids`, the function the served model's `generate_texts` and
  `generate_replies` call with all rows of a request at once (left padding, key/value cache), `top_k=1`;
- transformers: `model.generate(input_ids, attention_mask, do_sample=False)` on the same left-padded batch;
- Foundry, uncached: one prompt at a time through `GPT.generate(..., use_cache=False)`, which recomputes the
  whole context for every token, as serving did before.
Stop tokens are ignored so that all three do the same work: Foundry's `stop_token=None`, transformers'
`eos_token_id=None` (every row is checked to hold exactly `--new-tokens` new tokens). After one untimed run of each,
Foundry and transformers alternate, `--repeats` times each, and the median time counts (the uncached way runs once:
it is the slow one); the same torch threads serve both (`--threads`: on a machine busy with other work, two threads per
process wait on each other, and every figure drops tenfold and scatters).

Then the served model's `predict`, as `mlflow.pyfunc` calls it: the version saved with `mlflow.pyfunc.save_model` and
the arguments `foundry.serving.package.log_model` logs it with (its code, signature, limits), loaded with
`mlflow.pyfunc.load_model`, and `predict(DataFrame, params)` called on the same texts with greedy sampling
(`top_k=1`), one untimed run and then `--repeats` times, alternating with `generate_ids` on the ids `predict` encodes
(the difference is `predict`'s own cost: the signature's checks, the request's, tokenizing, decoding). Twice: `prompt`
rows on the version (continued as text, stopping at end-of-text) and `messages` rows (one user turn each) on the
version with the chat template that `foundry align` starts from (`foundry.align.start.chat_base`: the template's
markers added to the tokenizer, the embedding grown by as many rows; stopping at `<|end|>`). `predict` cannot be told
to ignore its stop tokens: tokens per second count the tokens generated, and each row's completion is checked to be
the decoded `generate_ids` output. The last line is the headline (target: Foundry >= 1.0x transformers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})  # nothing leaves loopback

import torch  # noqa: E402

from models.generate import generate_ids  # noqa: E402
from models.gpt import GPT, GPTConfig, load_saved  # noqa: E402
from models.tokens import EOT  # noqa: E402


def random_version(folder: Path) -> tuple[dict, Path, str]:
    """The default config's architecture with random weights, and a byte-level BPE of the config's vocabulary
    size trained on a few standard-library modules (a tokenizer `write_hf` can copy, and prompts to encode)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from foundry.config import FoundryConfig

    config = FoundryConfig()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.tokenizer.vocab_size,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(library_texts(), trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=config.tokenizer.vocab_size, **config.model.model_dump()))
    saved = {"model_args": model.config.to_dict(), "state_dict": model.state_dict()}
    return saved, folder / "tokenizer.json", "random weights, the default config's architecture"


def registered_version(uri: str) -> tuple[dict, Path, str]:
    from foundry.registry.versions import download, resolve
    from foundry.runtime.env import configure_environment

    home = configure_environment()
    artifacts = download(resolve(uri), home)
    return load_saved(artifacts / "model.pt"), artifacts / "tokenizer.json", uri


def library_texts() -> list[str]:
    import json
    import textwrap

    return [Path(m.__file__).read_text() for m in (argparse, json.decoder, statistics, tempfile, textwrap)]


def prompts(tokenizer, rows: int, longest: int) -> list[list[int]]:
    """`rows` prompts from 8 to `longest` tokens, each from a different place in the library's text."""
    ids = tokenizer.encode("\n".join(library_texts())).ids
    lengths = [8 + (longest - 8) * i // max(rows - 1, 1) for i in range(rows)]
    return [ids[997 * i : 997 * i + n] for i, n in enumerate(lengths)]


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def foundry_cached(model: GPT, rows: list[list[int]], n: int) -> list[list[int]]:
    return generate_ids(model, rows, n, temperature=1.0, top_k=1, seed=0, stop_token=None)


def foundry_uncached(model: GPT, rows: list[list[int]], n: int) -> list[list[int]]:
    out = []
    for row in rows:  # as serving generated before: one prompt at a time, the whole context every token
        generated = model.generate(torch.tensor([row]), n, 1.0, 1, torch.Generator().manual_seed(0), use_cache=False)
        out.append(generated[0, len(row) :].tolist())
    return out


def transformers_generate(hf, rows: list[list[int]], n: int, pad: int) -> list[list[int]]:
    ids, mask = left_padded(rows, pad)
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=pad)
    return out[:, ids.size(1) :].tolist()


def timed(fn, *args) -> tuple[float, list[list[int]]]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def check_lengths(name: str, out: list[list[int]], n: int) -> None:
    if any(len(row) != n for row in out):
        raise SystemExit(
            f"{name} generated {[len(r) for r in out]} tokens, not {n} per row: stop tokens were not ignored"
        )


def chat_version(saved: dict, tokenizer_file: Path, folder: Path) -> tuple[dict, Path]:
    """The version with the chat template, as `foundry align` starts from it (`foundry.align.start.chat_base`): the
    template's markers added to the tokenizer, the embedding and tied head grown by as many rows."""
    from tokenizers import Tokenizer

    from models.chat import ChatTemplate, add_chat_tokens, grow_vocabulary
    from models.gpt import gpt_from_saved

    template, tokenizer = ChatTemplate(), Tokenizer.from_file(str(tokenizer_file))
    if add_chat_tokens(tokenizer, template) == 0 and saved.get("chat_template"):
        return saved, tokenizer_file  # an aligned version has them already
    grown = grow_vocabulary(gpt_from_saved(saved), tokenizer.get_vocab_size())
    tokenizer.save(str(folder / "chat-tokenizer.json"))
    payload = {"model_args": grown.config.to_dict(), "state_dict": grown.state_dict()}
    return {**saved, **payload, "chat_template": template.to_dict()}, folder / "chat-tokenizer.json"


def served(saved: dict, tokenizer_file: Path, folder: Path):
    """The version as `mlflow.pyfunc.load_model` loads it, saved with the arguments `foundry.serving.package.log_model`
    logs it with (to a folder rather than a run: no tracking server)."""
    import mlflow.pyfunc
    import pandas as pd

    from foundry.serving.package import LEAF, MODEL_CODE, REQUIREMENTS, signature
    from models.request_limits import LIMITS

    folder.mkdir()
    torch.save(saved, folder / "model.pt")
    mlflow.pyfunc.save_model(
        str(folder / "pyfunc"),
        python_model=str(LEAF),
        code_paths=[str(MODEL_CODE)],
        artifacts={"checkpoint": str(folder / "model.pt"), "tokenizer": str(tokenizer_file)},
        signature=signature(LIMITS),
        model_config=dict(LIMITS),
        input_example=pd.DataFrame({"prompt": ["def main():"]}),
        pip_requirements=str(REQUIREMENTS),
    )
    return mlflow.pyfunc.load_model(str(folder / "pyfunc"))


def predict_work(loaded, texts: list[str], chat: bool):
    """The request `predict` gets, and what `generate_ids` is given for the same work: the ids `predict` encodes,
    its stop token, and how a row's ids decode into its completion."""
    import pandas as pd

    from models.generate import prompt_ids

    served_model = loaded.unwrap_python_model()
    model, tokenizer, template = served_model.model, served_model.tokenizer, served_model.template
    if chat:
        chats = [[{"role": "user", "content": text}] for text in texts]
        ids = [prompt_ids(model, tokenizer, template, c) for c in chats]
        stop = template.token_id(tokenizer, template.end)
        return pd.DataFrame({"messages": chats}), model, ids, stop, lambda out: template.decode_reply(tokenizer, out)
    eot = tokenizer.token_to_id(EOT)
    ids = [tokenizer.encode(text).ids or [eot] for text in texts]
    return pd.DataFrame({"prompt": texts}), model, ids, eot, tokenizer.decode


def time_predict(loaded, texts: list[str], chat: bool, n: int, repeats: int) -> dict:
    """`predict` and `generate_ids` on the same work, alternating `repeats` times; medians in seconds, the tokens
    generated (stop tokens end rows early: `predict` cannot ignore them)."""
    frame, model, ids, stop, decode = predict_work(loaded, texts, chat)
    params = {"max_new_tokens": n, "temperature": 1.0, "top_k": 1, "seed": 0}
    loaded.predict(frame, params), generate_ids(model, ids, n, 1.0, 1, 0, stop)  # warm-up, untimed
    times: dict[str, list[float]] = {"predict": [], "generate_ids": []}
    for _ in range(repeats):
        seconds, answer = timed(loaded.predict, frame, params)
        times["predict"].append(seconds)
        seconds, out = timed(generate_ids, model, ids, n, 1.0, 1, 0, stop)
        times["generate_ids"].append(seconds)
    completions = list(answer["completion"])
    if completions != [decode(row) for row in out]:
        raise SystemExit(f"predict's completions are not generate_ids' tokens decoded: {completions[:2]!r:.200}")
    median = {name: statistics.median(t) for name, t in times.items()}
    return {**median, "tokens": sum(map(len, out)), "runs": times, "vocabulary": model.config.vocab_size}


def report_predict(name: str, result: dict, rows: int, n: int) -> None:
    runs = ", ".join(f"{s:.3f}" for s in result["runs"]["predict"])
    extra = result["predict"] - result["generate_ids"]
    print(
        f"predict, {name} (vocabulary {result['vocabulary']}): {result['tokens'] / result['predict']:,.0f} tokens/s "
        f"({result['tokens']} of {rows * n} tokens generated; median of {len(result['runs']['predict'])} runs: "
        f"{runs} s); generate_ids on the same ids {result['tokens'] / result['generate_ids']:,.0f} tokens/s; "
        f"predict's own cost {1000 * extra:+.1f} ms a request ({extra / result['generate_ids']:+.0%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a registered version (models:/NAME@ALIAS); default: random weights")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch's intra-op threads, for both (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    from foundry.export.hf import write_hf

    with tempfile.TemporaryDirectory(prefix="bench-generate-") as scratch:
        folder = Path(scratch)
        saved, tokenizer_file, source = registered_version(args.model) if args.model else random_version(folder)
        model = GPT(GPTConfig(**saved["model_args"]))
        model.load_state_dict(saved["state_dict"])
        model.eval()
        hf = AutoModelForCausalLM.from_pretrained(write_hf(saved, tokenizer_file, folder / "hf"), dtype=torch.float32)
        hf.eval()
        hf.generation_config.eos_token_id = None  # no stopping: the same work as Foundry's stop_token=None
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        pad = tokenizer.token_to_id(EOT)
        block = model.config.block_size
        rows = prompts(tokenizer, args.rows, min(48, block - args.new_tokens))
        if max(map(len, rows)) + args.new_tokens > block:
            raise SystemExit(f"--new-tokens {args.new_tokens} leaves too little of the {block}-token context")

        foundry_cached(model, rows, args.new_tokens), transformers_generate(hf, rows, args.new_tokens, pad)  # warm-up
        times: dict[str, list[float]] = {"foundry": [], "transformers": []}
        for _ in range(args.repeats):
            seconds, ours = timed(foundry_cached, model, rows, args.new_tokens)
            times["foundry"].append(seconds)
            seconds, theirs = timed(transformers_generate, hf, rows, args.new_tokens, pad)
            times["transformers"].append(seconds)
        uncached_seconds, before = timed(foundry_uncached, model, rows, args.new_tokens)
        for name, out in (("Foundry", ours), ("transformers", theirs), ("Foundry uncached", before)):
            check_lengths(name, out, args.new_tokens)
        texts = [tokenizer.decode(row) for row in rows]
        served_prompts = served(saved, tokenizer_file, folder / "served")
        by_prompt = time_predict(served_prompts, texts, False, args.new_tokens, args.repeats)
        chat_saved, chat_tokenizer = chat_version(saved, tokenizer_file, folder)
        served_chats = served(chat_saved, chat_tokenizer, folder / "served-chat")
        by_chat = time_predict(served_chats, texts, True, args.new_tokens, args.repeats)

    tokens = len(rows) * args.new_tokens
    rate = {name: tokens / statistics.median(t) for name, t in times.items()}
    rate["uncached"] = tokens / uncached_seconds
    cfg = model.config
    print(
        f"model: {source}; {cfg.positions} positions, {cfg.n_layer} layers of width {cfg.n_embd}, "
        f"context {cfg.block_size}, vocabulary {cfg.vocab_size}, {model.num_params() / 1e6:.2f}M parameters"
    )
    print(
        f"work: {len(rows)} prompts of {min(map(len, rows))}-{max(map(len, rows))} tokens, {args.new_tokens} new "
        f"tokens each, greedy, stop tokens ignored; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for name, label in (("foundry", "Foundry, cached, batched"), ("transformers", "transformers generate, batched")):
        runs = ", ".join(f"{s:.3f}" for s in times[name])
        print(f"{label}: {rate[name]:,.0f} tokens/s (median of {args.repeats} runs: {runs} s)")
    print(
        f"Foundry, uncached, one prompt at a time (before): {rate['uncached']:,.0f} tokens/s ({uncached_seconds:.3f} s)"
    )
    report_predict("prompts, continued as text", by_prompt, len(rows), args.new_tokens)
    report_predict("chats of one user turn, the chat template's version", by_chat, len(rows), args.new_tokens)
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    print(
        f"same tokens: Foundry vs transformers {same}/{len(rows)} rows; cached vs uncached "
        f"{sum(a == b for a, b in zip(ours, before, strict=True))}/{len(rows)} rows"
    )
    print(
        f"generate: foundry {rate['foundry'] / rate['transformers']:.2f}x transformers (cached); "
        f"cached {rate['foundry'] / rate['uncached']:.1f}x uncached"
    )


if __name__ == "__main__":
    main()
