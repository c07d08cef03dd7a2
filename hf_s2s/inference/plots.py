"""Attention heatmaps: which source tokens each target token attended to (alignment), and which source tokens each
source token attended to in the encoder's self-attention.

Drawn on a bare ``Figure``, which renders to a file without pyplot: no display is needed and the process's
matplotlib backend is left as the user set it (matplotlib is imported only when a plot is drawn)."""

from pathlib import Path

import torch


def _draw_heatmap(fig, ax, weights: torch.Tensor, columns: list[str], rows: list[str], xlabel: str, ylabel: str,
                  title: str | None) -> None:
    """One heatmap of ``weights`` (len(rows), len(columns)) in [0, 1] on ``ax``, with its colour bar."""
    image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(columns)), columns, rotation=90)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, fraction=0.04)


def _save(fig, path: str | Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path


def plot_alignment(weights: torch.Tensor, source_tokens: list[str], target_tokens: list[str], path: str | Path,
                   title: str | None = None) -> Path:
    """Save a heatmap of ``weights`` (target_len, source_len) with target tokens as rows, as a PNG."""
    from matplotlib.figure import Figure

    weights = weights.detach().float().cpu()
    if weights.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"weights have shape {tuple(weights.shape)} but there are {len(target_tokens)} target and "
            f"{len(source_tokens)} source tokens"
        )
    fig = Figure(figsize=(1 + 0.45 * len(source_tokens), 1 + 0.4 * len(target_tokens)))
    _draw_heatmap(fig, fig.subplots(), weights, source_tokens, target_tokens, "source", "target", title)
    return _save(fig, path)


def check_layer_and_head(layers: int, heads: int, layer: int | None, head: int | None) -> None:
    """Refuse a ``layer`` / ``head`` (0-based; None = all layers / the mean of the heads) the encoder lacks."""
    for name, value, count in (("layer", layer, layers), ("head", head, heads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count):
            raise ValueError(f"{name} (--{name}) {value!r} is out of range: the encoder has {count} {name}"
                             f"{'s' if count != 1 else ''}{' per layer' if name == 'head' else ''}, numbered 0 to "
                             f"{count - 1}")


def plot_encoder_attention(weights: torch.Tensor, tokens: list[str], path: str | Path, *, layer: int | None = None,
                           head: int | None = None, title: str | None = None) -> Path:
    """Save heatmaps of one sentence's encoder self-attention ``weights`` (layers, heads, S, S), rows the attending
    token, as a PNG: layer ``layer`` only, or one panel per layer (None); head ``head``, or the mean of the heads
    (None). Layers and heads are numbered from 0, as in ``encoder_attentions``."""
    from matplotlib.figure import Figure

    weights = weights.detach().float().cpu()
    if weights.dim() != 4 or weights.shape[2:] != (len(tokens), len(tokens)):
        raise ValueError(f"weights have shape {tuple(weights.shape)}; expected (layers, heads, {len(tokens)}, "
                         f"{len(tokens)}) for {len(tokens)} tokens")
    check_layer_and_head(weights.shape[0], weights.shape[1], layer, head)
    maps = weights.mean(dim=1) if head is None else weights[:, head]  # (layers, S, S)
    shown = range(weights.shape[0]) if layer is None else [layer]
    side = 1 + 0.45 * len(tokens)
    fig = Figure(figsize=(side * len(shown), side))
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    which = "mean of heads" if head is None else f"head {head}"
    for ax, index in zip(axes, shown, strict=True):
        panel = f"layer {index}, {which}"
        _draw_heatmap(fig, ax, maps[index], tokens, tokens, "attended", "attending",
                      f"{title}\n{panel}" if title else panel)
    return _save(fig, path)
