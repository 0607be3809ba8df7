"""The chat template: role markers as special tokens, one rendering for training, evaluation and serving.

A conversation renders as `<|user|> content<|end|><|assistant|> content<|end|>...` (an optional
`<|system|>` turn first). Each content follows its marker after one space, as text inside a sentence
does: byte-level BPE then splits a word or a number the same way wherever it stands, so a reply that
copies part of its prompt copies tokens (without the space, "cloud" after a marker and " cloud" inside
the prompt share no token). The markers are special tokens added to the base's byte-level BPE, so they
never merge with text; the template travels inside every aligned `model.pt` (`chat_template`) and its
tokens inside `tokenizer.json`. Training learns the assistant's content and its closing `<|end|>`;
generation is prompted with the conversation so far and `<|assistant|>`, and stops at `<|end|>`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from models.gpt import GPT, GPTConfig

ROLES = ("system", "user", "assistant")


class TemplateError(ValueError):
    """A conversation the template cannot render: unknown role, or a marker inside content."""


@dataclass(frozen=True)
class ChatTemplate:
    name: str = "foundry-chat-v1"
    system: str = "<|system|>"
    user: str = "<|user|>"
    assistant: str = "<|assistant|>"
    end: str = "<|end|>"
    content_prefix: str = " "

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict) -> ChatTemplate:
        # Templates saved before `content_prefix` existed rendered content right after the marker.
        return cls(**{"content_prefix": "", **saved})

    @property
    def special_tokens(self) -> list[str]:
        return [self.system, self.user, self.assistant, self.end]

    def marker(self, role: str) -> str:
        if role not in ROLES:
            raise TemplateError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
        return getattr(self, role)

    def check(self, messages: list[dict]) -> None:
        for message in messages:
            self.marker(message["role"])
            if any(token in message["content"] for token in self.special_tokens):
                raise TemplateError(f"content may not hold the template's markers {self.special_tokens}")

    def render(self, messages: list[dict]) -> str:
        """The whole conversation as text (markers included)."""
        self.check(messages)
        return "".join(f"{self.marker(m['role'])}{self.content_prefix}{m['content']}{self.end}" for m in messages)

    def render_prompt(self, messages: list[dict]) -> str:
        """The conversation so far, then the assistant's marker: what generation continues."""
        return self.render(messages) + self.assistant

    def parse(self, text: str) -> list[dict]:
        """The messages of a rendered conversation (the inverse of `render`)."""
        by_marker = {self.marker(role): role for role in ROLES}
        messages = []
        for turn in text.split(self.end)[:-1]:
            marker = next((m for m in by_marker if turn.startswith(m)), None)
            if marker is None:
                raise TemplateError(f"turn {turn[:40]!r} does not start with a role marker")
            content = turn[len(marker) :]
            if not content.startswith(self.content_prefix):
                raise TemplateError(f"turn {turn[:40]!r} does not put {self.content_prefix!r} before its content")
            messages.append({"role": by_marker[marker], "content": content[len(self.content_prefix) :]})
        if text.split(self.end)[-1]:
            raise TemplateError(f"text after the last {self.end}: {text.split(self.end)[-1][:40]!r}")
        return messages

    def token_id(self, tokenizer, token: str) -> int:
        found = tokenizer.token_to_id(token)
        if found is None:
            raise TemplateError(f"the tokenizer has no {token}: add the template's tokens (add_chat_tokens)")
        return found

    def check_encodable(self, tokenizer, messages: list[dict]) -> None:
        """`check`, except that content holding a marker is taken when `tokenizer` encodes it as text
        (`models.tokens.text_only`): the markers then go in only by id, and the content cannot forge a turn."""
        if not getattr(tokenizer, "encode_special_tokens", False):
            self.check(messages)
        for message in messages:
            self.marker(message["role"])

    def encode(self, tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:
        """Token ids of the conversation and, for each, 1 where training predicts it (the assistant's content
        and its closing marker), else 0. The markers go in by id and each content is encoded on its own; for
        content without the markers' strings this is the encoding of the rendered text."""
        self.check_encodable(tokenizer, messages)
        ids: list[int] = []
        trained: list[int] = []
        for message in messages:
            content = self.encode_content(tokenizer, message["content"]) + [self.token_id(tokenizer, self.end)]
            learn = int(message["role"] == "assistant")
            ids += [self.token_id(tokenizer, self.marker(message["role"]))] + content
            trained += [0] + [learn] * len(content)
        return ids, trained

    def encode_prompt(self, tokenizer, messages: list[dict]) -> list[int]:
        ids, _ = self.encode(tokenizer, messages)
        return ids + [self.token_id(tokenizer, self.assistant)]

    def encode_reply(self, tokenizer, content: str) -> list[int]:
        """An assistant reply as training sees it: content, then the end marker."""
        self.check_encodable(tokenizer, [{"role": "assistant", "content": content}])
        return self.encode_content(tokenizer, content) + [self.token_id(tokenizer, self.end)]

    def encode_content(self, tokenizer, content: str) -> list[int]:
        return tokenizer.encode(self.content_prefix + content).ids

    def decode_reply(self, tokenizer, ids: list[int]) -> str:
        """A generated reply's text (ids after the assistant's marker, up to its end marker), without the
        template's prefix."""
        return tokenizer.decode(ids).removeprefix(self.content_prefix)


def add_chat_tokens(tokenizer, template: ChatTemplate) -> int:
    """Add the template's markers to a `tokenizers.Tokenizer` as special tokens; returns how many were new
    (new ids follow the existing vocabulary, so every existing id keeps its meaning)."""
    from tokenizers import AddedToken

    missing = [t for t in template.special_tokens if tokenizer.token_to_id(t) is None]
    return tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])


@torch.no_grad()
def grow_vocabulary(model: GPT, vocab_size: int) -> GPT:
    """The same model with `vocab_size` rows of embedding and (tied) output head. New rows start at the
    mean of the existing embeddings: a new token then looks like an average token, and its logit is the
    mean logit, so it neither dominates nor vanishes from the first outputs (Hewitt, 2021). Value-embedding
    tables grow the same way, each from its own rows' mean."""
    old = model.config.vocab_size
    if vocab_size < old:
        raise ValueError(f"cannot shrink the vocabulary from {old} to {vocab_size}")
    grown = GPT(GPTConfig(**{**model.config.to_dict(), "vocab_size": vocab_size}))
    state = model.state_dict()
    for name in [n for n in state if n == "wte.weight" or n.startswith("value_embeds.")]:
        mean = state[name].mean(dim=0, keepdim=True)
        state[name] = torch.cat([state[name], mean.expand(vocab_size - old, -1)])
    state["lm_head.weight"] = state["wte.weight"]
    grown.load_state_dict(state)
    return grown.eval()


def saved_template(saved: dict) -> ChatTemplate | None:
    """The template a saved `model.pt` (as loaded) carries, or None for a model never aligned."""
    found = saved.get("chat_template")
    return ChatTemplate.from_dict(found) if found else None
