"""Plots a person would rather look at than read: the training curve, models' bits per byte side by side, an
image classifier's confusion matrix and misclassified images."""

from __future__ import annotations

from pathlib import Path


def loss_curve(history: dict[str, list[tuple[int, float]]], path: Path) -> Path:
    """Train and validation loss against step, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for name, points in history.items():
        if points:
            steps, values = zip(*sorted(points))
            ax.plot(steps, values, label=name, marker="o" if len(points) < 20 else None)
    ax.set(xlabel="step", ylabel="loss (nats/token)", title="Training curve")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def bits_per_byte_bars(
    models: dict[str, float],
    baselines: dict[str, float],
    groups: dict[str, dict[str, float]],
    title: str,
    path: Path,
) -> Path:
    """Models' bits per byte as bars beside the baselines' (grey), lowest first; with `groups` ({group: {model:
    bits per byte}}), a second panel of bars per group and model. One PNG."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 2 if groups else 1
    bars = sorted([(v, k, "C0") for k, v in models.items()] + [(v, k, "0.7") for k, v in baselines.items()])
    fig, axes = plt.subplots(panels, 1, figsize=(8, 1.5 + 0.4 * len(bars) * panels), dpi=110, squeeze=False)
    ax = axes[0][0]
    ax.barh([label for _, label, _ in bars], [v for v, _, _ in bars], color=[c for _, _, c in bars])
    ax.invert_yaxis()  # the best at the top
    ax.set(xlabel="bits per byte (lower is better)", title=textwrap.fill(title, 70))
    ax.grid(axis="x", alpha=0.3)
    if groups:
        ax = axes[1][0]
        height = 0.8 / max(1, len(models))
        for i, name in enumerate(models):
            values = [groups[g].get(name, 0.0) for g in groups]
            ax.barh([j + i * height for j in range(len(groups))], values, height=height, label=name)
        ax.set_yticks([j + 0.4 - height / 2 for j in range(len(groups))], list(groups))
        ax.invert_yaxis()
        ax.set(xlabel="bits per byte by group of source files")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.3))  # below: bars reach the right
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def accuracy_bars(models: dict[str, float], baselines: dict[str, float], title: str, path: Path) -> Path:
    """Models' accuracy as bars beside the baselines' (grey), highest first (`foundry evaluate` on images). One PNG."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = sorted([(-v, k, "C0") for k, v in models.items()] + [(-v, k, "0.7") for k, v in baselines.items()])
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.4 * len(bars)), dpi=110)
    ax.barh([label for _, label, _ in bars], [-v for v, _, _ in bars], color=[c for _, _, c in bars])
    ax.invert_yaxis()  # the best at the top
    ax.set(xlabel="holdout accuracy (higher is better)", xlim=(0, 1), title=textwrap.fill(title, 70))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def confusion_matrix_plot(matrix, classes: list[str], path: Path) -> Path:
    """Counts of true (rows) against predicted (columns) classes, each cell labelled when there are few."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(classes)
    side = min(12.0, 2.5 + 0.45 * n)
    fig, ax = plt.subplots(figsize=(side, side), dpi=110)
    ax.imshow(matrix, cmap="Blues")
    if n <= 30:  # beyond that the numbers are unreadable: the colours tell it
        dark = matrix.max() / 2
        for (row, col), count in zip(((r, c) for r in range(n) for c in range(n)), matrix.flatten(), strict=True):
            colour = "white" if count > dark else "black"
            ax.text(col, row, str(count), ha="center", va="center", fontsize="small", color=colour)
        ax.set_xticks(range(n), classes, rotation=90)
        ax.set_yticks(range(n), classes)
    ax.set(xlabel="predicted", ylabel="true", title="Holdout confusion matrix")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def image_grid(images: list, titles: list[str], title: str, path: Path, columns: int = 6) -> Path:
    """uint8 images (C, H, W) in a grid, each with its title; an empty list gives a page that says so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = max(1, -(-len(images) // columns))
    fig, axes = plt.subplots(rows, columns, figsize=(1.6 * columns, 1.8 * rows + 0.4), dpi=110, squeeze=False)
    for ax in axes.flatten():
        ax.axis("off")
    for ax, image, caption in zip(axes.flatten(), images, titles, strict=False):
        pixels = image[0] if image.shape[0] == 1 else image.transpose(1, 2, 0)
        ax.imshow(pixels, cmap="gray" if image.shape[0] == 1 else None, vmin=0, vmax=255)
        ax.set_title(caption, fontsize="small")
    if not images:
        axes[0][0].text(0, 0.5, "none: every holdout image was classified right", fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
