"""models.gpt's multi-token prediction: while training, each position also predicts tokens further ahead
(`mtp_depth`), and the loss adds their mean; evaluation and generation read the next-token head alone."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from helpers_configs import tiny as tiny_config

from foundry.core.workload import named
from foundry.pretrain.training import vocabulary_only
from foundry.training.launch import launch
from foundry.training.trainer import build_module
from models.gpt import GPT, GPTConfig, load_gpt
from models.optim import muon_groups

V, C = 64, 32


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=C, positions="rotary", **kw))


def test_evaluation_and_generation_read_the_next_token_head_alone():
    plain, model = tiny().eval(), tiny(mtp_depth=2).eval()
    missing, unexpected = model.load_state_dict(plain.state_dict(), strict=False)
    assert (sorted(missing), unexpected) == (["ahead.0.weight", "ahead.1.weight"], [])
    idx = torch.randint(0, V, (2, 12))
    (logits, loss), (plain_logits, plain_loss) = model(idx[:, :-1], idx[:, 1:]), plain(idx[:, :-1], idx[:, 1:])
    torch.testing.assert_close((logits, loss), (plain_logits, plain_loss))
    assert torch.equal(model.generate(idx[:, :4], 8, top_k=1), plain.generate(idx[:, :4], 8, top_k=1))


def test_training_adds_the_weighted_mean_of_the_predictions_ahead_and_trains_their_matrices():
    """Position t's k-th matrix predicts target t + k (the token k + 1 after t) through the tied head."""
    model = tiny(mtp_depth=2, mtp_weight=0.25).train()
    x, y = torch.randint(0, V, (2, 12)), torch.randint(0, V, (2, 12))
    _, loss = model(x, y)
    states = model.hidden(x)
    own = F.cross_entropy(model.lm_head(states).flatten(0, 1), y.flatten())
    ahead = [
        F.cross_entropy(model.lm_head(m(states[:, :-k])).flatten(0, 1), y[:, k:].flatten())
        for k, m in ((1, model.ahead[0]), (2, model.ahead[1]))
    ]
    torch.testing.assert_close(loss, own + 0.25 * (ahead[0] + ahead[1]) / 2)
    loss.backward()
    assert all(m.weight.grad is not None and m.weight.grad.abs().sum() > 0 for m in model.ahead)
    muon = next(g for g in muon_groups(model, 0.1, 0.02) if g.get("muon"))["params"]
    assert len(muon) == 8 and not any(p is m.weight for p in muon for m in model.ahead)  # AdamW's, as the tables
    # Rows packed with several segments (alignment's) would predict across them: the next-token loss alone.
    segments = torch.zeros_like(x)
    segments[:, 6:] = 1
    torch.testing.assert_close(model(x, y, segments)[1], tiny().train()(x, y, segments)[1])  # the same draws


def test_the_extra_matrices_count_as_parameters_and_their_head_as_flops():
    plain, model = tiny(), tiny(mtp_depth=2)
    assert model.num_params() == plain.num_params() + 2 * C * C
    assert model.flops_per_token() - plain.flops_per_token() == 6 * 2 * C * C + 6 * 2 * V * C


def test_the_trainer_trains_them_and_saves_the_setting(tiny_dataset, tmp_path):
    config = tiny_config("train.max_steps=3", "model.mtp_depth=1")
    model = load_gpt(launch(config, tiny_dataset, tmp_path / "three", None, "v-test"))
    assert (model.config.mtp_depth, model.config.mtp_weight) == (1, 0.3)
    one = load_gpt(
        launch(tiny_config("train.max_steps=1", "model.mtp_depth=1"), tiny_dataset, tmp_path / "one", None, "v")
    )
    assert not torch.equal(model.ahead[0].weight, one.ahead[0].weight)  # the steps between moved them


def test_alignment_keeps_them_frozen(tmp_path):
    """SFT and DPO's pairs read the next-token head alone: under DDP a trainable matrix left without a gradient
    would fail the step."""
    config = tiny_config("model.mtp_depth=1")
    vocab = config.tokenizer.vocab_size
    sft = build_module(config, named("chat"), vocabulary_only(vocab, "chat"))
    parent = tmp_path / "model.pt"
    torch.save({"model_args": sft.model.config.to_dict(), "state_dict": sft.model.state_dict()}, parent)
    dpo_config = tiny_config("model.mtp_depth=1", f"train.init_from={parent}")
    dpo = build_module(dpo_config, named("chat"), vocabulary_only(vocab, "preference"))
    for module in (sft, dpo):
        assert [p.requires_grad for p in module.model.ahead.parameters()] == [False]
        assert all(p.requires_grad for p in module.model.blocks.parameters())
