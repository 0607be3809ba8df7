"""models.gpt's value embeddings: a token-indexed table per block whose row is added to the token's attention values."""

from __future__ import annotations

import torch

from models.chat import grow_vocabulary
from models.gpt import GPT, GPTConfig
from models.optim import muon_groups

V = 64


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=32, positions="rotary", **kw)).eval()


def test_new_tables_add_nothing_count_as_embeddings_and_train_under_adamw():
    """The tables start at zero, so a new model computes what the same weights compute without them."""
    plain, model = tiny(), tiny(value_embeddings=True)
    missing, unexpected = model.load_state_dict(plain.state_dict(), strict=False)
    assert (sorted(missing), unexpected) == (["value_embeds.0.weight", "value_embeds.1.weight"], [])
    assert model.num_params() == plain.num_params()
    assert model.num_params(non_embedding=False) == plain.num_params(non_embedding=False) + 2 * V * 32
    idx = torch.randint(0, V, (2, 12))
    torch.testing.assert_close(model(idx)[0], plain(idx)[0])
    muon = next(g for g in muon_groups(model, 0.1, 0.02) if g.get("muon"))["params"]
    assert len(muon) == 8 and not any(p is t.weight for p in muon for t in model.value_embeds)


def test_a_row_is_added_to_the_values_of_its_block():
    """A table whose every row is c adds c to every value of its block: what adding c to that block's value bias
    does; another block's table changes the logits too."""
    plain, model = tiny(), tiny(value_embeddings=True)
    model.load_state_dict(plain.state_dict(), strict=False)
    idx, c = torch.randint(0, V, (2, 12)), torch.randn(32)
    model.value_embeds[0].weight.data[:] = c
    plain.blocks[0].attn.qkv.bias.data[2 * 32 :] += c  # q, k, v rows in that order
    torch.testing.assert_close(model(idx)[0], plain(idx)[0])
    torch.nn.init.normal_(model.value_embeds[1].weight)
    assert not torch.allclose(model(idx)[0], plain(idx)[0], atol=1e-3)


def test_a_grown_vocabulary_keeps_the_tables_and_starts_new_rows_at_their_mean():
    model = tiny(value_embeddings=True)
    for table in model.value_embeds:
        torch.nn.init.normal_(table.weight)
    idx = torch.randint(0, V, (2, 12))
    grown = grow_vocabulary(model, V + 3)
    torch.testing.assert_close(grown(idx)[0][..., :V], model(idx)[0], rtol=1e-5, atol=1e-5)
    for old, new in zip(model.value_embeds, grown.value_embeds, strict=True):
        torch.testing.assert_close(new.weight[:V], old.weight)
        torch.testing.assert_close(new.weight[V:], old.weight.mean(dim=0).expand(3, -1))
