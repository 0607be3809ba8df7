"""A GPT-style decoder-only transformer, nanoGPT-shaped. Pure PyTorch: no paths, no tracking."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.decay import DecayedByName
from models.kv_cache import Decoder


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 128
    n_layer: int = 3
    n_head: int = 6
    n_embd: int = 192
    dropout: float = 0.0
    # The defaults are the architecture every model saved before these fields existed was trained with.
    positions: Literal["learned", "rotary"] = "learned"
    # Hashed bigram input embeddings: a table of this many rows, indexed by a hash of (previous token, token) and
    # added to the token embedding; 0 is none (every model saved before the field existed).
    bigram_buckets: int = 0
    # Queries and keys RMS-normalised per head, without weights, before rotation (False: every earlier model).
    qk_norm: bool = False
    # The MLP's nonlinearity: the exact GELU (every earlier model), or relu2, ReLU squared.
    mlp_activation: Literal["gelu", "relu2"] = "gelu"
    # Value embeddings: a token-indexed table per block, its row added to the block's attention values (False:
    # every earlier model).
    value_embeddings: bool = False
    # Multi-token prediction while training (`GPT._ahead_loss`); 0 is off, as every earlier model was trained.
    mtp_depth: int = 0
    mtp_weight: float = 0.3

    def __post_init__(self) -> None:
        if self.mlp_activation not in ("gelu", "relu2"):  # a saved model's args are not validated elsewhere
            raise ValueError(f"mlp_activation {self.mlp_activation!r} is not gelu or relu2")

    def to_dict(self) -> dict:
        return asdict(self)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.qk_norm = cfg.n_head, cfg.qk_norm
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.proj.is_residual = True  # scaled at init, GPT-2 style
        self.dropout = cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        rotation: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache=None,
        values: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """With `cache` (a `models.kv_cache.LayerCache`), x holds only the new tokens: their keys and values are
        appended to the cached ones, and `mask` (B, 1, T, cached + T) says what each new token sees (None: all).
        `values` (B, T, C), the tokens' value embeddings, are added to their values."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        if values is not None:
            v = v + values
        # (B, nh, T, hs)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.qk_norm:
            q, k = F.rms_norm(q, (q.size(-1),)), F.rms_norm(k, (k.size(-1),))
        if rotation is not None:
            q, k = rotate(q, *rotation), rotate(k, *rotation)
        dropout = self.dropout if self.training else 0.0
        if cache is not None:
            k, v = cache.append(k, v)
        if mask is None and cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        else:  # (B, 1, T, T'), True where attending is allowed: causal and within one segment
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.proj.is_residual = True
        self.dropout = nn.Dropout(cfg.dropout)
        self.relu2 = cfg.mlp_activation == "relu2"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = F.relu(h).square() if self.relu2 else F.gelu(h)
        return self.dropout(self.proj(h))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, rotation: tuple | None = None, cache=None, values=None
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask, rotation, cache, values)
        return x + self.mlp(self.ln_2(x))


class GPT(DecayedByName, nn.Module):
    """Matrices decay (embeddings included), biases and norms do not (`optimizer_groups`, by name: see models/decay.py)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        # Rotary positions rotate queries and keys instead: no position table.
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.positions == "learned" else None
        self.bigram = nn.Embedding(cfg.bigram_buckets, cfg.n_embd) if cfg.bigram_buckets else None
        # modded-nanogpt's value embeddings: each block reads a token's own row, beside what the residual stream
        # carries. Outside `blocks`, so that Muon leaves them to AdamW like the other tables.
        tables = (nn.Embedding(cfg.vocab_size, cfg.n_embd) for _ in range(cfg.n_layer))
        self.value_embeds = nn.ModuleList(tables) if cfg.value_embeddings else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings
        self.apply(self._init_weights)
        for table in [t for t in [self.bigram, *(self.value_embeds or [])] if t is not None]:
            nn.init.zeros_(table.weight)  # an untrained table adds nothing: the model starts as one without it
        # Multi-token prediction's matrices (training only; outside `blocks`, as above), drawn after every other
        # weight, which are then what they would be without them.
        ahead = [nn.Linear(cfg.n_embd, cfg.n_embd, bias=False) for _ in range(cfg.mtp_depth)]
        self.ahead = nn.ModuleList(ahead).apply(self._init_weights) if ahead else None
        self.remember_matrices()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            std = 0.02
            if getattr(module, "is_residual", False):
                std /= math.sqrt(2 * self.config.n_layer)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:  # tables only looked up (the token table is also the head's weights: counted)
            n -= sum(t.weight.numel() for t in (self.wpe, self.bigram, *(self.value_embeds or [])) if t is not None)
        return n

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, segments: torch.Tensor | None = None):
        """Logits (B, T, V); with targets also the mean cross-entropy in nats per token, over the targets that are
        not -100 (masked); training with `mtp_depth`, plus mtp_weight times the predictions further ahead. With
        `segments` (B, T), several sequences share a row: a token attends only to earlier tokens of its own segment,
        and positions count from each segment's start."""
        states = self.hidden(idx, segments)
        logits = self.lm_head(states)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)
        if self.ahead is not None and self.training and segments is None:  # packed rows: k ahead crosses segments
            loss = loss + self.config.mtp_weight * self._ahead_loss(states, targets)
        return logits, loss

    def _ahead_loss(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the predictions k = 1 .. mtp_depth tokens past the next one, within the window."""
        losses = []
        for k, project in enumerate(self.ahead, start=1):  # position t against target t + k
            logits = self.lm_head(project(states[:, :-k]))
            losses.append(F.cross_entropy(logits.flatten(0, 1), targets[:, k:].flatten(), ignore_index=-100))
        return torch.stack(losses).mean()

    def hidden(self, idx: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, n_embd): the final normalised states the output head reads (see `forward` for `segments`)."""
        T = idx.size(1)
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds block_size {self.config.block_size}")
        mask = None
        if segments is None:
            pos = torch.arange(T, device=idx.device)
        else:
            pos, mask = segment_positions(segments), segment_mask(segments)
        x, rotation = self._embed(idx, pos)
        x = self.drop(x)
        for layer, block in enumerate(self.blocks):
            x = block(x, mask, rotation, None, self._values(idx, layer))
        return self.ln_f(x)

    def _values(self, idx: torch.Tensor, layer: int) -> torch.Tensor | None:
        return None if self.value_embeds is None else self.value_embeds[layer](idx)

    def _embed(
        self, idx: torch.Tensor, pos: torch.Tensor, previous: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, tuple | None]:
        """(token embeddings (B, T, n_embd), plus the position embeddings of `pos` and the bigram embeddings; the
        rotary angles of `pos` for the attention, or None with learned positions). `previous` (B, T) holds the
        token before each of `idx` when idx does not (generation from a cache); None: idx's own shifted."""
        x = self.wte(idx)
        if self.bigram is not None:
            x = x + self.bigram(bigram_rows(idx, pos, previous, self.config.bigram_buckets))
        if self.wpe is not None:
            return x + self.wpe(pos), None
        return x, rotary_angles(pos, self.config.n_embd // self.config.n_head)

    def masked_loss(
        self, idx: torch.Tensor, targets: torch.Tensor, segments: torch.Tensor | None = None
    ) -> torch.Tensor:
        """`forward`'s loss, with the output head applied only where a target counts. Supervised fine-tuning
        counts only assistant tokens (a quarter of a packed row of the instruction set), and the head over a
        4,100-token vocabulary is a large share of this small model's compute per token: skipping the other
        positions makes a step cheaper at the same loss and gradients."""
        counted = targets != -100
        logits = self.lm_head(self.hidden(idx, segments)[counted])
        return F.cross_entropy(logits, targets[counted])

    def flops_per_token(self) -> float:
        """nanoGPT's estimate_mfu numerator: 6N + 12 L H Q T."""
        cfg = self.config
        head_dim = cfg.n_embd // cfg.n_head
        ahead = 6 * cfg.mtp_depth * cfg.vocab_size * cfg.n_embd  # the tied head again per depth (its matrix: in N)
        return 6 * self.num_params() + 12 * cfg.n_layer * cfg.n_head * head_dim * cfg.block_size + ahead

    def last_logits(
        self, idx: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, cache=None, previous=None
    ) -> torch.Tensor:
        """Logits (B, V) of each row's last token, for generation: `idx` (B, T) at positions `pos` (B, T), each
        row its own (left padding), attending where `mask` (B, 1, T, T') allows (None: causal, or every cached
        token for T == 1). With `cache` (`models.kv_cache.KVCache`) idx holds only the tokens not yet cached,
        and `previous` (B, T) the token before each (see `_embed`)."""
        x, rotation = self._embed(idx, pos, previous)
        layers = cache.layers if cache is not None else [None] * len(self.blocks)
        for i, (block, layer) in enumerate(zip(self.blocks, layers, strict=True)):
            x = block(x, mask, rotation, layer, self._values(idx, i))
        return self.lm_head(self.ln_f(x[:, -1]))

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        stop_token: int | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """`idx` (B, T) and up to `max_new_tokens` sampled after it, until every row has drawn `stop_token`.
        Past block_size tokens the context is the last block_size (a sliding window). `use_cache=False`
        recomputes the whole context for every token: the same tokens, slower (the benchmark's baseline)."""
        decoder = Decoder(self, idx.tolist()) if use_cache and max_new_tokens > 0 else None
        for _ in range(max_new_tokens):
            if decoder is None:
                logits, _ = self(idx[:, -self.config.block_size :])
                logits = logits[:, -1, :]
            else:
                logits = decoder.next_logits()
            probs = sampling_probs(logits, temperature, top_k)
            next_id = torch.multinomial(probs, num_samples=1, generator=generator)
            idx = torch.cat((idx, next_id), dim=1)
            if decoder is not None:
                decoder.push(next_id[:, 0].tolist())
            if stop_token is not None and bool((next_id == stop_token).all()):
                break
        return idx


def sampling_probs(logits: torch.Tensor, temperature: float, top_k: int | None) -> torch.Tensor:
    """(B, V) next-token probabilities from last-position logits: scaled by temperature, top_k kept."""
    logits = logits / max(temperature, 1e-6)
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < v[:, [-1]]] = -float("inf")
    return F.softmax(logits, dim=-1)


def rotary_angles(pos: torch.Tensor, head_dim: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's rotation angles (RoFormer), shaped to broadcast over (B, nh, T, hs / 2):
    positions (T,) give (T, hs / 2), per-row positions (B, T) give (B, 1, T, hs / 2)."""
    inverse_frequency = base ** (-torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim)
    angles = pos.to(torch.float32)[..., None] * inverse_frequency
    if angles.dim() == 3:
        angles = angles[:, None]
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Queries or keys (B, nh, T, hs) rotated pairwise (first half with second half) by their position's angles."""
    first, second = x.float().chunk(2, dim=-1)
    rotated = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    return rotated.type_as(x)


def bigram_rows(idx: torch.Tensor, pos: torch.Tensor, previous: torch.Tensor | None, rows: int) -> torch.Tensor:
    """(B, T) row of a `rows`-row bigram table for each (previous token, token) pair. A token at position 0 (of
    its row, window or segment) has no previous token the model may see: its pair uses -1, an id no token has
    whatever the vocabulary (which `models.chat.grow_vocabulary` grows)."""
    if previous is None:
        previous = torch.cat((torch.zeros_like(idx[:, :1]), idx[:, :-1]), dim=1)
    previous = torch.where(pos == 0, -1, previous)
    # A multiplicative hash of the pair: pairs spread over the rows; some share one, as in any hashed table.
    return (previous * 1_000_003 + idx) % rows


def segment_positions(segments: torch.Tensor) -> torch.Tensor:
    """(B, T) position of each token within its segment: 0 where a segment starts."""
    T = segments.size(1)
    index = torch.arange(T, device=segments.device).expand_as(segments)
    starts = torch.ones_like(segments, dtype=torch.bool)
    starts[:, 1:] = segments[:, 1:] != segments[:, :-1]
    start_of = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    return index - start_of


def segment_mask(segments: torch.Tensor) -> torch.Tensor:
    """(B, 1, T, T) attention mask: causal, and never across segments (a document-causal mask)."""
    T = segments.size(1)
    causal = torch.ones(T, T, dtype=torch.bool, device=segments.device).tril()
    same = segments[:, :, None] == segments[:, None, :]
    return (same & causal)[:, None]


def load_saved(checkpoint) -> dict:
    """A `model.pt` (a path or an open file) as saved: model args, weights, and what training recorded."""
    return torch.load(checkpoint, map_location="cpu", weights_only=True)


def gpt_from_saved(saved: dict) -> GPT:
    model = GPT(GPTConfig(**saved["model_args"]))
    model.load_state_dict(saved["state_dict"])
    return model.eval()


def load_gpt(checkpoint) -> GPT:
    """The model saved in a `model.pt` (a path or an open file): its args and weights, in eval mode."""
    return gpt_from_saved(load_saved(checkpoint))
