"""models: the GPT module, the window samplers and the learning-rate schedule."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from models.chat import grow_vocabulary
from models.data import RandomWindows, RankDraw, SequentialWindows
from models.gpt import GPT, GPTConfig, gpt_from_saved, rotary_angles, rotate, segment_positions
from models.lit_base import warmup_cosine

V, BLOCK = 64, 16


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, block_size=BLOCK, n_layer=2, n_head=2, n_embd=32)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg))


# --- GPT -------------------------------------------------------------------------------------


def test_forward_shapes_and_initial_loss():
    model = tiny()
    idx = torch.randint(0, V, (3, 10), generator=torch.Generator().manual_seed(1))
    logits, loss = model(idx)
    assert logits.shape == (3, 10, V) and loss is None
    logits, loss = model(idx, torch.roll(idx, -1, dims=1))
    assert logits.shape == (3, 10, V)
    assert loss.shape == ()
    # Small initial weights: near-uniform predictions, loss close to ln(vocab).
    assert loss.item() == pytest.approx(math.log(V), abs=0.1)


@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_forward_is_causal(positions):
    model = tiny(positions=positions).eval()
    idx = torch.randint(0, V, (1, 12), generator=torch.Generator().manual_seed(2))
    changed = idx.clone()
    changed[0, -1] = (idx[0, -1] + 1) % V
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_rotary_model_has_no_position_table():
    learned, rotary = tiny(), tiny(positions="rotary")
    assert rotary.wpe is None and "wpe.weight" not in rotary.state_dict()
    assert learned.num_params(non_embedding=False) - rotary.num_params(non_embedding=False) == BLOCK * 32
    assert rotary.num_params() == rotary.num_params(non_embedding=False)


def test_rotary_scores_depend_on_the_offset_only():
    """A query at m and a key at n score the same as at m + s and n + s: attention sees relative positions."""
    q, k = torch.randn(2, 1, 1, 1, 8, generator=torch.Generator().manual_seed(3))

    def score(m: int, n: int) -> float:
        cos_m, sin_m = rotary_angles(torch.tensor([m]), 8)
        cos_n, sin_n = rotary_angles(torch.tensor([n]), 8)
        return (rotate(q, cos_m, sin_m) * rotate(k, cos_n, sin_n)).sum().item()

    assert score(7, 3) == pytest.approx(score(12, 8), abs=1e-5)
    assert score(7, 3) != pytest.approx(score(7, 4), abs=1e-3)


def test_rotary_positions_restart_in_each_segment():
    """Packed with another sequence, a sequence gets the logits it gets alone (positions count from its start)."""
    model = tiny(positions="rotary").eval()
    first, second = torch.randint(0, V, (1, 5)), torch.randint(0, V, (1, 7))
    segments = torch.tensor([[0] * 5 + [1] * 7])
    assert segment_positions(segments)[0, 5:].tolist() == list(range(7))
    packed, _ = model(torch.cat([first, second], dim=1), segments=segments)
    alone, _ = model(second)
    torch.testing.assert_close(packed[:, 5:], alone, rtol=1e-5, atol=1e-5)


def test_bigram_rows_see_no_pair_across_a_segment_or_window_start():
    """A token's pair is with the token before it, except at position 0 (of a row or a packed segment), where
    there is none: packed, the second sequence gets the logits it gets alone; the table changes the logits."""
    model = tiny(positions="rotary", bigram_buckets=31).eval()
    assert not model.bigram.weight.any()  # a new table adds nothing until trained
    torch.nn.init.normal_(model.bigram.weight)
    first, second = torch.randint(0, V, (1, 5)), torch.randint(0, V, (1, 7))
    packed, _ = model(torch.cat([first, second], dim=1), segments=torch.tensor([[0] * 5 + [1] * 7]))
    alone, _ = model(second)
    torch.testing.assert_close(packed[:, 5:], alone, rtol=1e-5, atol=1e-5)
    grown, _ = grow_vocabulary(model, V + 3)(second)  # chat tokens added: the old tokens' pairs keep their rows
    torch.testing.assert_close(grown[..., :V], alone, rtol=1e-5, atol=1e-5)
    model.bigram.weight.data.zero_()
    assert not torch.allclose(model(second)[0], alone, atol=1e-3)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys(qk_norm):
    """RMS-normalised per head, queries and keys scaled by any positive factor give the same logits; without the
    norm they do not. Both models keep the parameters (and count) of one without it."""
    model, idx = tiny(positions="rotary", qk_norm=qk_norm).eval(), torch.randint(0, V, (2, 12))
    assert model.num_params() == tiny(positions="rotary").num_params()
    before, _ = model(idx)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight[: 2 * 32] *= 7.0  # the q and k rows; v's stay
            block.attn.qkv.bias[: 2 * 32] *= 7.0
    after, _ = model(idx)
    assert torch.allclose(before, after, atol=1e-4) == qk_norm


def test_relu2_squares_the_relu_in_the_mlp():
    model = tiny(mlp_activation="relu2")
    mlp, x = model.blocks[0].mlp, torch.randn(3, 32)
    torch.testing.assert_close(mlp(x), mlp.proj(torch.relu(mlp.fc(x)) ** 2))
    assert not torch.allclose(tiny().blocks[0].mlp(x), mlp(x), atol=1e-4)
    with pytest.raises(ValueError, match="mlp_activation 'swish' is not gelu or relu2"):
        GPTConfig(vocab_size=V, mlp_activation="swish")  # as a saved model's args would load


def test_a_model_saved_before_rotary_loads_with_learned_positions():
    model = tiny()
    args = model.config.to_dict()
    for key in ("positions", "bigram_buckets", "value_embeddings", "mtp_depth"):  # what a model.pt written before holds
        del args[key]
    loaded = gpt_from_saved({"model_args": args, "state_dict": model.state_dict()})
    c = loaded.config
    assert (c.positions, c.bigram_buckets, c.value_embeddings, c.mtp_depth) == ("learned", 0, False, 0)
    idx = torch.randint(0, V, (2, 9))
    torch.testing.assert_close(loaded(idx)[0], model.eval()(idx)[0])


def test_block_size_overflow():
    model = tiny()
    model(torch.zeros(1, BLOCK, dtype=torch.long))  # exactly block_size is fine
    with pytest.raises(ValueError, match=f"sequence of {BLOCK + 1} tokens exceeds block_size {BLOCK}"):
        model(torch.zeros(1, BLOCK + 1, dtype=torch.long))


def test_tied_embeddings():
    model = tiny()
    assert model.lm_head.weight is model.wte.weight
    _, loss = model(torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long))
    loss.backward()
    assert model.wte.weight.grad is not None
    # Shared once: the parameter count does not include a separate head matrix.
    assert sum(p is model.wte.weight for p in model.parameters()) == 1


def test_residual_projections_start_smaller():
    model = tiny(n_layer=2, n_embd=128, n_head=4)
    expected = 0.02 / math.sqrt(2 * 2)
    for block in model.blocks:
        for proj in (block.attn.proj, block.mlp.proj):
            assert proj.weight.std().item() == pytest.approx(expected, rel=0.05)
        for linear in (block.attn.qkv, block.mlp.fc):
            assert linear.weight.std().item() == pytest.approx(0.02, rel=0.05)
            assert torch.count_nonzero(linear.bias) == 0
    assert model.wte.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_optimizer_groups_split_matrices_from_vectors():
    model = tiny()
    decay, no_decay = model.optimizer_groups(0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() < 2 for p in no_decay["params"])
    grouped = [id(p) for p in decay["params"] + no_decay["params"]]
    assert len(grouped) == len(set(grouped))
    assert set(grouped) == {id(p) for p in model.parameters()}
    assert any(p is model.wte.weight for p in decay["params"])
    assert any(p is model.ln_f.weight for p in no_decay["params"])
    assert any(p is model.blocks[0].attn.qkv.bias for p in no_decay["params"])
    torch.optim.AdamW([decay, no_decay], lr=1e-3)  # accepted as-is


def test_generate_respects_max_new_tokens_and_seed():
    model = tiny().eval()
    prompt = torch.tensor([[1, 2, 3]])
    a = model.generate(prompt, 7, generator=torch.Generator().manual_seed(42))
    b = model.generate(prompt, 7, generator=torch.Generator().manual_seed(42))
    c = model.generate(prompt, 7, generator=torch.Generator().manual_seed(43))
    assert a.shape == (1, 10)
    assert torch.equal(a[:, :3], prompt)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert int(a.min()) >= 0 and int(a.max()) < V
    assert model.generate(prompt, 0).shape == (1, 3)


def test_generate_crops_context_beyond_block_size():
    model = tiny().eval()
    prompt = torch.zeros(2, BLOCK, dtype=torch.long)
    out = model.generate(prompt, 5, generator=torch.Generator().manual_seed(0))
    assert out.shape == (2, BLOCK + 5)


def test_generate_top_k_one_is_greedy_and_stop_token_stops():
    model = tiny().eval()
    prompt = torch.tensor([[5, 6]])
    greedy = model(prompt)[0][0, -1].argmax().item()
    out = model.generate(prompt, 4, top_k=1, generator=torch.Generator().manual_seed(0))
    assert out[0, 2].item() == greedy
    stopped = model.generate(prompt, 10, top_k=1, stop_token=greedy)
    assert stopped.tolist() == [[5, 6, greedy]]


# --- RandomWindows ---------------------------------------------------------------------------


def batches_as_lists(batches) -> list:
    return [(x.tolist(), y.tolist()) for x, y in batches]


def windows(tokens: np.ndarray | None = None, batch_size: int = 4, **draw) -> RandomWindows:
    tokens = np.arange(500, dtype=np.uint16) if tokens is None else tokens
    return RandomWindows(tokens, 8, batch_size, RankDraw(**{"seed": 7, "steps_per_epoch": 6, **draw}))


def test_random_windows_are_next_token_pairs():
    sampler = windows()
    assert len(sampler) == 6
    for x, y in sampler:
        assert x.shape == y.shape == (4, 8) and x.dtype == torch.int64
        assert torch.equal(y, x + 1)  # tokens are arange: targets are the next tokens
        assert int(y.max()) < 500


def test_random_windows_resume_mid_epoch():
    full = windows()
    uninterrupted = batches_as_lists(list(full) + list(full))
    assert len(uninterrupted) == 12

    first = windows()
    it = iter(first)
    seen = batches_as_lists([next(it) for _ in range(4)])
    state = json.loads(json.dumps(first.state_dict()))  # survives a checkpoint's serialisation
    assert state == {"epoch": 0, "batch_in_epoch": 4, "world_size": 1}  # the world size: resumable at another

    resumed = windows()
    resumed.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    rest = batches_as_lists(list(resumed) + list(resumed))
    assert seen == uninterrupted[:4]
    assert rest == uninterrupted[4:]
    assert resumed.state_dict() == {"epoch": 2, "batch_in_epoch": 0, "world_size": 1}


def test_random_windows_epochs_and_ranks_differ():
    sampler = windows()
    epoch0, epoch1 = batches_as_lists(sampler), batches_as_lists(sampler)
    assert epoch0 != epoch1
    assert batches_as_lists(windows()) == epoch0  # same seed, same epoch: same batches
    assert batches_as_lists(windows(seed=8)) != epoch0


def test_random_windows_ranks_split_the_global_batch():
    # Two ranks of batch 4 see exactly the windows one process of batch 8 sees, half each.
    whole = [x for x, _ in windows(batch_size=8)]
    halves = [[x for x, _ in windows(rank=r, world_size=2)] for r in (0, 1)]
    for step, x in enumerate(whole):
        assert torch.equal(torch.cat([halves[0][step], halves[1][step]]), x)
    assert batches_as_lists(windows(rank=1, world_size=2)) != batches_as_lists(windows(rank=0, world_size=2))
    with pytest.raises(ValueError, match="outside a world of 2"):
        windows(rank=2, world_size=2)


def test_random_windows_draw_the_windows_they_always_drew():
    # Pinned from the loader before `RankDraw` grouped its arguments: a checkpoint resumes into the same stream.
    assert [int(x[0, 0]) for x, _ in windows()] == [464, 284, 27, 449, 64, 401]


def test_a_rank_draw_refuses_a_rank_outside_its_world():
    with pytest.raises(ValueError, match="rank 2 is outside a world of 2"):
        RankDraw(seed=7, steps_per_epoch=6, rank=2, world_size=2)


def test_random_windows_need_enough_tokens():
    with pytest.raises(ValueError, match="too few"):
        windows(tokens=np.arange(8))


# --- SequentialWindows -----------------------------------------------------------------------


def test_sequential_windows_cover_without_overlap():
    tokens = np.arange(60, dtype=np.uint16)  # (60 - 1) // 8 = 7 windows, batches of 3, 3, 1
    sampler = SequentialWindows(tokens, 8, 3)
    batches = list(sampler)
    assert len(sampler) == len(batches) == 3
    assert [x.shape[0] for x, _ in batches] == [3, 3, 1]
    xs = torch.cat([x for x, _ in batches]).flatten().tolist()
    ys = torch.cat([y for _, y in batches]).flatten().tolist()
    assert xs == list(range(56))
    assert ys == list(range(1, 57))


def test_sequential_windows_max_batches():
    sampler = SequentialWindows(np.arange(60), 8, 3, max_batches=2)
    batches = list(sampler)
    assert len(sampler) == len(batches) == 2
    assert torch.cat([x for x, _ in batches]).flatten().tolist() == list(range(48))


def test_sequential_windows_need_enough_tokens():
    with pytest.raises(ValueError, match="too few"):
        SequentialWindows(np.arange(5), 8, 1)


def test_sequential_windows_exactly_one_window():
    batches = list(SequentialWindows(np.arange(9), 8, 1))
    assert len(batches) == 1 and batches[0][1].tolist() == [list(range(1, 9))]


def test_overlapping_windows_score_each_target_once_with_context():
    tokens = np.arange(40, dtype=np.uint16)  # windows at 0, 4, ..., 28 (the last ends on token 36)
    sampler = SequentialWindows(tokens, 8, 3, stride=4)
    batches = list(sampler)
    assert [x.shape[0] for x, _ in batches] == [3, 3, 2] and sampler.end() == 37
    xs, ys = torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])
    assert xs[:, 0].tolist() == [0, 4, 8, 12, 16, 20, 24, 28]
    scored = ys[ys != -100].tolist()
    assert scored == list(range(1, 37))  # each target once, in order
    # After the first window only the last 4 targets count: each has at least 4 tokens before it in its window.
    assert (ys[1:, :4] == -100).all() and (ys[1:, 4:] != -100).all() and (ys[0] != -100).all()


def test_window_stride_must_fit_the_window():
    with pytest.raises(ValueError, match="stride 9"):
        SequentialWindows(np.arange(20), 8, 1, stride=9)
    with pytest.raises(ValueError, match="stride 0"):
        SequentialWindows(np.arange(20), 8, 1, stride=0)


# --- warmup_cosine ---------------------------------------------------------------------------


def test_warmup_cosine_shape():
    warmup, total, floor = 10, 110, 0.1
    ramp = [warmup_cosine(s, warmup, total, floor) for s in range(warmup)]
    assert ramp == pytest.approx([(s + 1) / warmup for s in range(warmup)])
    assert ramp[-1] == pytest.approx(1.0)
    assert warmup_cosine(warmup, warmup, total, floor) == pytest.approx(1.0)
    assert warmup_cosine(60, warmup, total, floor) == pytest.approx(floor + (1 - floor) / 2)  # halfway
    assert warmup_cosine(total, warmup, total, floor) == pytest.approx(floor)
    assert warmup_cosine(total + 500, warmup, total, floor) == pytest.approx(floor)
    decay = [warmup_cosine(s, warmup, total, floor) for s in range(warmup, total + 1)]
    assert all(a >= b for a, b in zip(decay, decay[1:]))
    assert min(decay) >= floor


def test_warmup_cosine_without_warmup():
    assert warmup_cosine(0, 0, 100, 0.0) == pytest.approx(1.0)
    assert warmup_cosine(100, 0, 100, 0.0) == pytest.approx(0.0)
    assert warmup_cosine(50, 0, 100, 0.2) == pytest.approx(0.6)
