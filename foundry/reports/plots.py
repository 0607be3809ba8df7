"""Plots a person would rather look at than read: the training curve."""

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
