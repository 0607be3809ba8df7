"""Tiny byte-level BPE tokenizers, with and without the chat template's markers."""

from __future__ import annotations

from models.chat import ChatTemplate, add_chat_tokens


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
