"""Image classifiers defined by one typed config: a small convolutional network or a small ViT.
Pure PyTorch: no paths, no tracking. Both take uint8 (or float 0-255) images (B, C, H, W), channels-last or not,
and normalise them inside `forward`, so training, evaluation and serving share one preprocessing."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.decay import DecayedByName


@dataclass
class VisionConfig:
    num_classes: int
    arch: Literal["cnn", "vit"] = "cnn"
    in_channels: int = 1
    image_size: int = 32
    # cnn: one stage per width; every stage after the first halves the resolution.
    widths: tuple[int, ...] = (32, 64, 128)
    blocks_per_stage: int = 1
    # vit
    patch_size: int = 4
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    pooling: Literal["cls", "mean"] = "cls"
    dropout: float = 0.0

    def __post_init__(self):
        self.widths = tuple(self.widths)  # a list after a JSON or YAML round trip
        if self.num_classes < 2:
            raise ValueError(f"num_classes is {self.num_classes}: a classifier needs at least 2 classes")
        if self.arch not in ("cnn", "vit"):
            raise ValueError(f"arch is {self.arch!r}: choose 'cnn' or 'vit'")
        if self.arch == "cnn" and (not self.widths or self.blocks_per_stage < 1):
            raise ValueError("a cnn needs at least one width in `widths` and blocks_per_stage >= 1")
        if self.arch == "vit" and self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}")
        if self.arch == "vit" and self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")

    def to_dict(self) -> dict:
        return asdict(self)


def normalise(images: torch.Tensor) -> torch.Tensor:
    """0-255 pixels (any dtype) to float in [-1, 1]."""
    return images.float().div(127.5).sub(1.0)


class ConvNet(nn.Module):
    """conv-BN-ReLU stages, global average pooling, a linear head."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        layers, channels = [], cfg.in_channels
        for stage, width in enumerate(cfg.widths):
            for block in range(cfg.blocks_per_stage):
                stride = 2 if stage > 0 and block == 0 else 1
                layers += [nn.Conv2d(channels, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
                channels = width
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(channels, cfg.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x).mean(dim=(2, 3))  # (B, C)
        return self.head(self.dropout(x))


class Block(nn.Module):
    """Pre-norm transformer block; every patch attends to every patch (no causal mask)."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.n_head, self.dropout = cfg.n_head, cfg.dropout
        self.ln_1, self.ln_2 = nn.LayerNorm(cfg.n_embd), nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    """Patch embedding (a strided convolution), learned positions, transformer blocks, class token or mean pooling."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.pooling = cfg.pooling
        n_patches = (cfg.image_size // cfg.patch_size) ** 2
        self.patch = nn.Conv2d(cfg.in_channels, cfg.n_embd, cfg.patch_size, cfg.patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.n_embd)) if cfg.pooling == "cls" else None
        self.pos = nn.Parameter(torch.randn(1, n_patches + (cfg.pooling == "cls"), cfg.n_embd) * 0.02)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.Sequential(*(Block(cfg) for _ in range(cfg.n_layer)))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)  # (B, T, C)
        if self.cls is not None:
            x = torch.cat((self.cls.expand(x.size(0), -1, -1), x), dim=1)
        x = self.ln_f(self.blocks(self.drop(x + self.pos)))
        return self.head(x[:, 0] if self.cls is not None else x.mean(dim=1))


class ImageClassifier(DecayedByName, nn.Module):
    """Matrices, kernels and the class token decay; biases, norms and the positions do not (`optimizer_groups`,
    by name: see models/decay.py)."""

    never_decayed = frozenset({"net.pos"})

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.config = cfg
        self.net = ConvNet(cfg) if cfg.arch == "cnn" else ViT(cfg)
        self.remember_matrices()

    def forward(self, images: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (B, num_classes) of images (B, C, H, W) in 0-255; with targets (B,) also the mean cross-entropy."""
        logits = self.net(normalise(images))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits, targets)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_image(self) -> float:
        """Training FLOPs of one image (forward and backward: 3x the forward's 2 FLOPs per multiply-add),
        the numerator of MFU as `GPT.flops_per_token` is for text. Norms, activations and pooling are left out."""
        cfg = self.config
        return 6 * (_cnn_macs(cfg) if cfg.arch == "cnn" else _vit_macs(cfg))


def _cnn_macs(cfg: VisionConfig) -> int:
    macs, channels, size = 0, cfg.in_channels, cfg.image_size
    for stage, width in enumerate(cfg.widths):
        for block in range(cfg.blocks_per_stage):
            if stage > 0 and block == 0:
                size = (size - 1) // 2 + 1  # 3x3, stride 2, padding 1
            macs += 9 * channels * width * size * size
            channels = width
    return macs + channels * cfg.num_classes


def _vit_macs(cfg: VisionConfig) -> int:
    """Per image: the patch embedding and every block's matrices once per token, attention's scores and
    weighted sum (T^2 C per layer each), the head once."""
    n_patches = (cfg.image_size // cfg.patch_size) ** 2
    tokens, C = n_patches + (cfg.pooling == "cls"), cfg.n_embd
    patch = n_patches * cfg.in_channels * cfg.patch_size**2 * C
    block_matrices = 12 * C * C  # qkv 3C^2, proj C^2, MLP 8C^2
    return patch + cfg.n_layer * (tokens * block_matrices + 2 * tokens * tokens * C) + C * cfg.num_classes


@dataclass(frozen=True)
class AugmentConfig:
    """Training-time augmentation. Flips are off by default: a mirrored digit is another symbol or none."""

    crop_padding: int = 2  # random crop of the image padded with this many zero pixels on each side
    translate: float = 0.0  # a further random shift of up to this share of the side
    flip: bool = False  # horizontal, half the images

    def __post_init__(self):
        if self.crop_padding < 0 or not 0.0 <= self.translate < 0.5:
            raise ValueError("augment: crop_padding must be >= 0 and translate in [0, 0.5)")


def augment(images: torch.Tensor, cfg: AugmentConfig, generator: torch.Generator) -> torch.Tensor:
    """Images (B, C, H, W), each shifted by its own random offset (zeros fill what moves in) and maybe flipped.
    Same images, config and generator state: same output. The dtype and memory format are kept."""
    B, _, H, W = images.shape
    reach = cfg.crop_padding + round(cfg.translate * max(H, W))
    out = images
    if reach:
        dy, dx = (torch.randint(-reach, reach + 1, (B,), generator=generator) for _ in range(2))
        padded = F.pad(images, (reach, reach, reach, reach))
        rows = (torch.arange(H)[None] + reach + dy[:, None]).to(images.device)  # (B, H)
        cols = (torch.arange(W)[None] + reach + dx[:, None]).to(images.device)  # (B, W)
        batch = torch.arange(B, device=images.device)[:, None, None]
        out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    if cfg.flip:
        flips = (torch.rand(B, generator=generator) < 0.5).to(images.device)[:, None, None, None]
        out = torch.where(flips, out.flip(-1), out)
    memory_format = torch.channels_last if images.is_contiguous(memory_format=torch.channels_last) else None
    return out.contiguous(memory_format=memory_format or torch.contiguous_format)


def classifier_from_saved(saved: dict) -> ImageClassifier:
    """A saved dict's model (`model_args` and `state_dict`, as `models.gpt` saves), in eval mode."""
    model = ImageClassifier(VisionConfig(**saved["model_args"]))
    model.load_state_dict(saved["state_dict"])
    return model.eval()
