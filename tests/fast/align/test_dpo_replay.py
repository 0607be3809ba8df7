"""Replay in DPO (`align.replay_fraction`): pretraining windows beside each batch of preference pairs, resumable,
and their next-token loss added to DPO's, each window weighing as much as one pair."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from conftest import REPO_ROOT
from helpers_align import TINY_LIT_ARGS, TINY_LIT_SETTINGS, as_lists, assert_resumes_exactly

from foundry.align.records import save_split
from foundry.config import load_config
from foundry.core.contracts import DataVersion, Replay
from foundry.data.manifest import DatasetManifest
from models.align import IGNORE
from models.align_data import Pairs, PairsWithReplay, PreferenceBatches, Ragged, pair_batch
from models.data import RandomWindows, RankDraw
from models.gpt import GPT, GPTConfig
from models.lit_align import LitDPO

PRETRAINING = np.arange(100, 160, dtype=np.uint16)
ARGS, SETTINGS = TINY_LIT_ARGS, TINY_LIT_SETTINGS


def pair_records(n: int = 12) -> list[dict[str, list[int]]]:
    return [
        {"prompt": [30, 1 + i % 20, 33, 32], "chosen": [2 + i % 25, 33], "rejected": [3 + i % 25, 4, 33]}
        for i in range(n)
    ]


def as_pairs(records: list[dict[str, list[int]]]) -> Pairs:
    return Pairs(*(Ragged.from_lists([r[f] for r in records]) for f in ("prompt", "chosen", "rejected")))


def replaying(pairs_per_batch: int = 3, windows: int = 1, windows_per_epoch: int = 2) -> PairsWithReplay:
    pairs = PreferenceBatches(as_pairs(pair_records()), pairs_per_batch, 7, 0)
    return PairsWithReplay(pairs, RandomWindows(PRETRAINING, 16, windows, RankDraw(3, windows_per_epoch)))


def test_each_dpo_batch_is_the_pairs_alone_beside_the_windows_alone():
    alone_pairs = list(PreferenceBatches(as_pairs(pair_records()), 3, 7, 0))
    alone_windows = RandomWindows(PRETRAINING, 16, 1, RankDraw(3, 2))
    windows = list(alone_windows) + list(alone_windows)  # the windows' epoch (2) ends inside the pairs' (4)
    expected = [(*p, *w) for p, w in zip(alone_pairs, windows, strict=True)]
    assert as_lists(replaying()) == as_lists(expected)


def test_dpo_replay_resumes_where_both_streams_were():
    assert_resumes_exactly(replaying)


def test_dpo_loaders_bring_replayed_windows_beside_fewer_pairs(tiny_config, tiny_dataset, tmp_path):
    from foundry.align.training import aligned_loaders
    from foundry.pretrain.shards import load_split

    for split in ("train", "holdout"):
        save_split(tmp_path, split, pair_records(), "preference")
    vocab = DatasetManifest.read(tiny_dataset).vocab_size + 4  # the chat template's tokens
    manifest = DatasetManifest(
        kind="preference", method="dpo", source="s", source_digest="d", source_skipped={}, stats={},
        holdout_fraction=0.5, vocab_size=vocab, eot_id=0, train_tokens=0, holdout_tokens=0,
    )  # fmt: skip
    config = load_config(REPO_ROOT / "configs" / "tiny.yaml", ["train.batch_size=4", "align.replay_fraction=0.25"])
    source = Replay(data=DataVersion(data_version="f" * 32, remote="/remote"), dir=tiny_dataset)
    train, _ = aligned_loaders(config, tmp_path, manifest, 0, 1, source)
    x, y, wx, wy = next(iter(train))
    block = tiny_config.model.block_size
    assert x.shape[0] == 2 * 3 and wx.shape == wy.shape == (1, block)  # 3 pairs and 1 window: a quarter of 4
    windows = np.lib.stride_tricks.sliding_window_view(load_split(tiny_dataset, "train"), block + 1)
    row = torch.cat([wx[0], wy[0, -1:]]).numpy()
    assert bool((windows == row).all(axis=1).any())  # a window of the pretraining train split, every token trained


def test_dpo_loss_with_replay_is_the_dpo_loss_plus_each_window_weighing_one_pair():
    module = LitDPO(ARGS, beta=0.5, sft_weight=0.3, **SETTINGS)
    torch.manual_seed(1)
    module.set_reference(GPT(GPTConfig(**ARGS)).state_dict())  # another start: the DPO term is not trivial
    x, y = pair_batch(as_pairs(pair_records(3)), [0, 1, 2], pad_id=0)
    wx = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(2))
    wy = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(3))

    def logps(model: GPT, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:  # (B, T), 0 where ignored
        logits, _ = model(inputs)
        picked = F.log_softmax(logits, -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return torch.where(targets == IGNORE, torch.zeros_like(picked), picked)

    policy, reference = logps(module.model, x, y).sum(1), logps(module.reference, x, y).sum(1)
    margin = (policy[:3] - reference[:3]) - (policy[3:] - reference[3:])
    dpo = -F.logsigmoid(0.5 * margin).mean() + 0.3 * -policy[:3].sum() / (y[:3] != IGNORE).sum()
    replay = -logps(module.model, wx, wy).mean()  # every window token counts
    loss, stats = module.step_loss((x, y, wx, wy))
    torch.testing.assert_close(loss, dpo + (2 / 3) * replay)  # 2 windows beside 3 pairs
    torch.testing.assert_close(module.step_loss((x, y))[0], dpo)  # without windows: DPO's loss as it was
    torch.testing.assert_close(stats["replay_nll"], replay.detach())
