"""models/optim.py: Muon for the blocks' matrices and AdamW for the rest, as one optimizer, against torch's own."""

from __future__ import annotations

import copy

import pytest
import torch

from models.gpt import GPT, GPTConfig
from models.lora import LoRASpec, add_lora
from models.optim import MuonAdamW, muon_groups, orthogonalize


def twins(shape: tuple[int, ...]) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    torch.manual_seed(0)
    first = torch.nn.Parameter(torch.randn(shape))
    return first, torch.nn.Parameter(first.detach().clone())


def step_both(ours: torch.optim.Optimizer, theirs: torch.optim.Optimizer, a, b, steps: int = 6) -> None:
    gradients = torch.Generator().manual_seed(1)
    for _ in range(steps):
        grad = torch.randn(a.shape, generator=gradients)
        a.grad, b.grad = grad.clone(), grad.clone()
        ours.step()
        theirs.step()


def test_adamw_groups_step_as_torch_adamw():
    a, b = twins((6, 5))
    ours = MuonAdamW([{"params": [a], "weight_decay": 0.1}], lr=1e-2, betas=(0.9, 0.95))
    theirs = torch.optim.AdamW([b], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    step_both(ours, theirs, a, b)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(12, 6), (6, 12)])
def test_muon_groups_step_as_torch_muon(shape):
    """torch.optim.Muon orthogonalizes in bfloat16, ours in float32 on CPU: the same steps to bfloat16's precision."""
    a, b = twins(shape)
    ours = MuonAdamW([{"params": [a], "muon": True, "weight_decay": 0.1}], lr=2e-2)
    theirs = torch.optim.Muon([b], lr=2e-2, weight_decay=0.1, momentum=0.95, nesterov=True)
    step_both(ours, theirs, a, b)
    assert (a - b).abs().max() < 5e-3
    assert (a - b).abs().max() > 0  # the float32 iteration is not bfloat16's


def test_orthogonalize_gives_singular_values_near_one():
    matrix = torch.randn(48, 16, generator=torch.Generator().manual_seed(2)) * 7
    singular = torch.linalg.svdvals(orthogonalize(matrix))
    # The quintic iteration trades exactness for speed: singular values land in about [0.7, 1.2].
    assert singular.min() > 0.6 and singular.max() < 1.3
    assert orthogonalize(matrix).shape == matrix.shape and orthogonalize(matrix).dtype == matrix.dtype


def test_muon_groups_take_the_blocks_matrices_only():
    model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32, positions="rotary"))
    matrices, vectors, hidden = muon_groups(model, weight_decay=0.1, muon_lr=0.02)
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in hidden["params"]) == sorted(
        f"blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")
    )
    assert hidden["muon"] and hidden["lr"] == 0.02
    assert [names[id(p)] for p in matrices["params"]] == ["wte.weight"]  # tied to the output head
    assert all(p.dim() == 1 for p in vectors["params"]) and vectors["weight_decay"] == 0.0
    count = sum(p.numel() for g in (hidden, matrices, vectors) for p in g["params"])
    assert count == sum(p.numel() for p in model.parameters())


def test_muon_groups_leave_frozen_parameters_out():
    model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=1, n_head=2, n_embd=32))
    add_lora(model, LoRASpec(rank=2, alpha=4.0, targets=("attn.qkv",)))
    groups = muon_groups(model, weight_decay=0.1, muon_lr=0.02)
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for g in groups for p in g["params"]} == trainable


def old_rule(model: torch.nn.Module, blocks: str, never_decayed: tuple[str, ...] = ()) -> list[dict]:
    """The groups before weight decay was chosen by name (models/decay.py): Muon's matrices by shape under
    `blocks`, every other trainable parameter decayed when `p.dim() >= 2` (a ViT's positions never)."""
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    hidden = [p for n, p in trainable if p.dim() == 2 and n.startswith(blocks)]
    rest = [(n, p) for n, p in trainable if all(p is not h for h in hidden)]
    decayed = [p for n, p in rest if p.dim() >= 2 and n not in never_decayed]
    groups = [
        {"params": decayed, "weight_decay": 0.1},
        {"params": [p for _, p in rest if all(p is not d for d in decayed)], "weight_decay": 0.0},
    ]
    return groups + ([{"params": hidden, "muon": True, "lr": 0.02, "weight_decay": 0.1}] if hidden else [])


def shown(groups: list[dict]) -> list[tuple]:
    return [(sorted((k, v) for k, v in g.items() if k != "params"), [id(p) for p in g["params"]]) for g in groups]


@pytest.mark.parametrize("positions", ["learned", "rotary"])
@pytest.mark.parametrize("lora", [False, True])
def test_muon_groups_of_a_gpt_are_the_ones_the_shape_rule_gave(positions, lora):
    model = GPT(GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32, positions=positions))
    if lora:
        add_lora(model, LoRASpec(rank=2))
    assert shown(muon_groups(model, 0.1, 0.02)) == shown(old_rule(model, "blocks."))


@pytest.mark.parametrize("arch", ["vit", "cnn"])
def test_muon_adamw_of_an_image_classifier_groups_as_the_shape_rule_did(arch):
    from models.lit_vision import LitVision
    from models.optim import muon_adamw
    from models.vision import ImageClassifier, VisionConfig

    model = ImageClassifier(VisionConfig(num_classes=3, arch=arch, image_size=8, n_layer=2, n_embd=16, widths=(4, 8)))
    ours = muon_adamw(model, 1e-3, 0.02, 0.1, LitVision.muon_blocks).param_groups
    before = MuonAdamW(old_rule(model, "net.blocks.", ("net.pos",)), lr=1e-3, betas=(0.9, 0.95)).param_groups
    assert shown(ours) == shown(before) and len(ours) == (3 if arch == "vit" else 2)


def test_muon_refuses_a_vector():
    with pytest.raises(ValueError, match="2-D parameters only"):
        MuonAdamW([{"params": [torch.nn.Parameter(torch.zeros(4))], "muon": True}], lr=0.02)


def test_state_dict_resumes_the_same_steps():
    a, b = twins((8, 4))
    first = MuonAdamW([{"params": [a], "muon": True}], lr=2e-2)
    step_both(first, torch.optim.SGD([b], lr=0.0), a, b, steps=3)
    # A checkpoint holds a copy: state_dict() shares the live buffers, which later steps change in place.
    saved = {"weights": a.detach().clone(), "optimizer": copy.deepcopy(first.state_dict())}
    step_both(first, torch.optim.SGD([b], lr=0.0), a, b, steps=3)
    resumed = torch.nn.Parameter(saved["weights"])
    again = MuonAdamW([{"params": [resumed], "muon": True}], lr=2e-2)
    again.load_state_dict(saved["optimizer"])
    gradients = torch.Generator().manual_seed(1)  # step_both's second call drew these same three again
    for _ in range(3):
        resumed.grad = torch.randn(resumed.shape, generator=gradients)
        again.step()
    torch.testing.assert_close(resumed, a, rtol=0, atol=0)
