"""Attention heatmaps: which source tokens each target token attended to."""

from pathlib import Path

import torch


def plot_alignment(weights: torch.Tensor, source_tokens: list[str], target_tokens: list[str], path: str | Path,
                   title: str | None = None) -> Path:
    """Save a heatmap of ``weights`` (target_len, source_len) with target tokens as rows, as a PNG.

    Drawn on a bare ``Figure``, which renders to a file without pyplot: no display is needed and the process's
    matplotlib backend is left as the user set it (matplotlib is imported only when a plot is drawn)."""
    from matplotlib.figure import Figure

    weights = weights.detach().float().cpu()
    if weights.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"weights have shape {tuple(weights.shape)} but there are {len(target_tokens)} target and "
            f"{len(source_tokens)} source tokens"
        )
    fig = Figure(figsize=(1 + 0.45 * len(source_tokens), 1 + 0.4 * len(target_tokens)))
    ax = fig.subplots()
    image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(source_tokens)), source_tokens, rotation=90)
    ax.set_yticks(range(len(target_tokens)), target_tokens)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path
