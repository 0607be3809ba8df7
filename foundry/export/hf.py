"""A saved Foundry model as a Hugging Face folder that `transformers.AutoModelForCausalLM.from_pretrained` opens.

`write_hf` writes `model.safetensors`, `config.json` (GPT-2 or GPT-NeoX: `foundry.export.layout`),
`tokenizer.json` (the version's own, byte for byte), `tokenizer_config.json` (end-of-text token, maximum length
and, for an aligned version, a Jinja `chat_template` rendering exactly what `models.chat.ChatTemplate` renders),
`generation_config.json` and a `README.md` model card (with `co2_eq_emissions` in its metadata when `saved` holds
them). Pure: no registry, no network.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from foundry.export.layout import UnsupportedArchitecture, check_vocab, hf_config, hf_tensors, target
from models.chat import ChatTemplate, saved_template
from models.tokens import EOT

FILES = (
    "model.safetensors",
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "README.md",
)
ARCHITECTURES = {"gpt2": "GPT-2 (`GPT2LMHeadModel`)", "gpt_neox": "GPT-NeoX (`GPTNeoXForCausalLM`)"}


# What the exported architecture does past the trained context, where Foundry slides its window instead.
BEYOND_CONTEXT = {
    "learned": "GPT-2 has no positions beyond them",
    "rotary": "GPT-NeoX attends over the whole sequence, at positions the model was never trained on",
}


def _literal(text: str) -> str:
    """`text` as a Jinja string literal (Jinja reads JSON's ASCII escapes as Python's)."""
    return json.dumps(text, ensure_ascii=True)


def jinja_template(template: ChatTemplate) -> str:
    """The Jinja chat template of `template`: each message as `marker + prefix + content + end`, then the assistant's
    marker with `add_generation_prompt`; an unknown role or a marker inside content raises, as `ChatTemplate.check`,
    and so does `<|endoftext|>` inside content: the rendered text is tokenized with its special tokens read as such,
    where Foundry's serving encodes a user's text as text (`models.tokens.text_only`), which a Jinja template cannot.
    Every piece of text is a quoted literal, so Jinja's whitespace control cannot touch it."""
    roles = "".join(
        f"{{%- {'if' if i == 0 else 'elif'} message['role'] == {_literal(role)} -%}}{{{{- {_literal(marker)} -}}}}"
        for i, (role, marker) in enumerate(
            [("system", template.system), ("user", template.user), ("assistant", template.assistant)]
        )
    )
    markers = "[" + ", ".join(_literal(t) for t in [*template.special_tokens, EOT]) + "]"
    return (
        "{%- for message in messages -%}"
        f"{{%- for marker in {markers} -%}}{{%- if marker in message['content'] -%}}"
        f"{{{{- raise_exception('content may not hold a template marker or {EOT}') -}}}}"
        "{%- endif -%}{%- endfor -%}"
        f"{roles}"
        "{%- else -%}{{- raise_exception('unknown role ' ~ message['role']) -}}{%- endif -%}"
        f"{{{{- {_literal(template.content_prefix)} ~ message['content'] ~ {_literal(template.end)} -}}}}"
        "{%- endfor -%}"
        f"{{%- if add_generation_prompt -%}}{{{{- {_literal(template.assistant)} -}}}}{{%- endif -%}}"
    )


def _token_id(vocab: dict[str, int], token: str) -> int:
    if token not in vocab:
        raise UnsupportedArchitecture(f"the tokenizer has no {token!r}, which the exported model's config names")
    return vocab[token]


def tokenizer_files(saved: dict, vocab: dict[str, int]) -> tuple[dict, dict]:
    """(`tokenizer_config.json`, `generation_config.json`) of a saved model whose tokenizer has `vocab`.
    An aligned model ends a reply with its template's end marker: that is its end of sequence (Foundry's serving
    stops there too); a base model's is the end-of-text token."""
    template = saved_template(saved)
    eot = _token_id(vocab, EOT)
    stop = EOT if template is None else template.end
    tokenizer = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": saved["model_args"].get("block_size", 128),
        "bos_token": EOT,
        "eos_token": stop,
        "pad_token": EOT,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
    }
    if template is not None:
        for token in template.special_tokens:
            _token_id(vocab, token)
        tokenizer["chat_template"] = jinja_template(template)
        tokenizer["additional_special_tokens"] = template.special_tokens
    generation = {"bos_token_id": eot, "eos_token_id": _token_id(vocab, stop), "pad_token_id": eot}
    return tokenizer, generation | {"do_sample": False, "transformers_version": "5.24.0"}


def _metadata(saved: dict) -> str:
    """The card's YAML front matter that the Hub reads: `co2_eq_emissions` when the version's run recorded its
    energy (`foundry.export.publish` adds it to `saved`); empty otherwise."""
    if "co2_eq_emissions" not in saved:
        return ""
    return "---\n" + yaml.safe_dump({"co2_eq_emissions": saved["co2_eq_emissions"]}, sort_keys=False) + "---\n"


def model_card(saved: dict, arch: str, source: str) -> str:
    args = saved["model_args"]
    template = saved_template(saved)
    chat = (
        "It is an aligned (chat) model: `tokenizer.apply_chat_template(messages, add_generation_prompt=True)` "
        f"renders Foundry's template ({template.name}) with the same token ids; a reply ends at `{template.end}`.\n"
        if template
        else "It is a base language model: it continues text and ends a document with `<|endoftext|>`.\n"
    )
    return (
        _metadata(saved) + f"# {source}\n\n"
        f"A GPT-style decoder trained by Foundry, exported from `{source}` in {ARCHITECTURES[arch]}'s layout.\n\n"
        f"- layers {args.get('n_layer')}, heads {args.get('n_head')}, width {args.get('n_embd')}, "
        f"context {args.get('block_size')} tokens, vocabulary {args.get('vocab_size')}, "
        f"positions: {args.get('positions', 'learned')}\n"
        "- weights float32 in `model.safetensors`; the output head is tied to the token embedding\n"
        "- tokenizer: byte-level BPE (`tokenizer.json`, the one the model was trained with)\n\n"
        f"{chat}\n"
        "```python\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        "model = AutoModelForCausalLM.from_pretrained(FOLDER)\n"
        "tokenizer = AutoTokenizer.from_pretrained(FOLDER)\n"
        'ids = tokenizer("Once upon a time", return_tensors="pt").input_ids\n'
        "print(tokenizer.decode(model.generate(ids, max_new_tokens=32)[0]))\n"
        "```\n\n"
        f"Past {args.get('block_size')} tokens of context the two differ: Foundry slides its window over the last "
        f"{args.get('block_size')} tokens; {BEYOND_CONTEXT[args.get('positions', 'learned')]}.\n"
    )


def write_hf(saved: dict, tokenizer_file: Path, out_dir: Path, source: str = "a Foundry model") -> Path:
    """Write the Hugging Face folder of `saved` (as `models.gpt.load_saved` returns it) and its tokenizer into
    `out_dir` (created; the files above are replaced); returns `out_dir`. `UnsupportedArchitecture` before
    writing anything when no architecture computes what this model computes."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer

    args = saved["model_args"]
    arch = target(args)
    tensors = hf_tensors(args, saved["state_dict"])
    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab(with_added_tokens=True)
    check_vocab(max(vocab.values()), args)
    tokenizer_config, generation_config = tokenizer_files(saved, vocab)
    config = hf_config(args, eos_token_id=generation_config["eos_token_id"], bos_token_id=vocab[EOT])
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(tokenizer_file, out_dir / "tokenizer.json")
    for name, value in (
        ("config.json", config),
        ("tokenizer_config.json", tokenizer_config),
        ("generation_config.json", generation_config),
    ):
        (out_dir / name).write_text(json.dumps(value, indent=2) + "\n")
    (out_dir / "README.md").write_text(model_card(saved, arch, source))
    return out_dir
