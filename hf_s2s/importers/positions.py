"""The sinusoid position tables OpenNMT-py and Joey NMT store in their checkpoints, checked against the positions
hf_s2s computes.

Both toolkits compute their table once, in float32, at model construction (5,000 rows: OpenNMT-py's
``PositionalEncoding(max_len=5000)``, Joey NMT's ``PositionalEncoding(max_len=5000)``), register it as a buffer and
save it; the converted model computes the same sinusoids at run time (:func:`sinusoidal_positions`) and drops the
table. The two float32 computations agree up to rounding, and rounding grows with the position: the angle
``p * w_i`` is near ``p`` for the lowest frequency, so one rounding of it or of ``w_i`` moves it by about
``p * 2^-23``, and sin/cos follow. At position 4,850 of a width-64 table that is 2.4e-4 (measured with Joey NMT
2.3.0's own module), which a fixed ``atol=1e-4`` refused. :func:`check_sinusoid_table` compares every stored row with
a bound that grows with its position as float32 rounding does: a table of another layout, base or offset differs by
O(1) somewhere in its first rows, so the bound keeps its teeth.
"""

import torch

from ..models.attention_transformer_seq2seq import sinusoidal_positions
from .checkpoints import CheckpointError

# float32's machine epsilon, 2^-23
EPSILON = torch.finfo(torch.float32).eps
# How many rounding steps of size p * 2^-23 two float32 computations of one angle p * w_i may differ by: w_i's own
# (exp or pow: a few ulps, the frequencies being <= 1) plus the product's (half an ulp of the angle); sin/cos add a
# few ulps of a value <= 1, covered by the constant term.
ROUNDING_STEPS = 4
# what a layout is called where a refusal names what the stored table is instead
LAYOUT_NAMES = {"interleaved": "interleaved (sin at even, cos at odd columns, frequencies 10000^(-2i/d))",
                "tensor2tensor": "tensor2tensor (sines then cosines, frequencies 10000^(-i/(d/2 - 1)))",
                "concat": "concatenated (sines then cosines, frequencies 10000^(-2i/d))"}


def rounding_bound(rows: int) -> torch.Tensor:
    """The largest difference float32 rounding explains between two computations of a sinusoid row, for rows
    0 .. ``rows`` - 1: ``ROUNDING_STEPS x 2^-23 x (position + 1)``. (rows, 1)"""
    return (ROUNDING_STEPS * EPSILON * (torch.arange(rows, dtype=torch.float32) + 1))[:, None]


def check_sinusoid_table(table: torch.Tensor, name: str, layout: str, where: str) -> None:
    """Accept ``table`` (the checkpoint's tensor ``name``, (positions, d)) when every row is the sinusoid hf_s2s
    computes with ``layout`` for that position, up to float32 rounding at that position (:func:`rounding_bound`).
    Otherwise a :class:`CheckpointError` says which row differs, by how much against what rounding allows, the
    values found and expected, and which layout the table is if it is another one; ``where`` names the toolkit's
    setting the layout came from (e.g. "OpenNMT-py's -position_encoding_type SinusoidalInterleaved")."""
    rows, width = table.shape
    table = table.float()
    bound = rounding_bound(rows)

    def excess(kind: str) -> torch.Tensor:  # how far each row is past the bound: (positions,)
        return ((table - sinusoidal_positions(torch.arange(rows), width, kind)).abs() - bound).amax(dim=1)

    over = excess(layout)
    if not (over > 0).any():
        return
    row = int((over > 0).nonzero()[0])
    expected = sinusoidal_positions(torch.tensor([row]), width, layout)[0]
    column = int((table[row] - expected).abs().argmax())
    others = [kind for kind in LAYOUT_NAMES if kind != layout and not (excess(kind) > 0).any()]
    instead = (f"; the stored table is the {LAYOUT_NAMES[others[0]]} one" if others else
               "; it is none of the sinusoid layouts hf_s2s computes")
    raise CheckpointError(
        f"{name} is not the position table {where} computes for width {width}: row {row} (position {row}) differs "
        f"from the {LAYOUT_NAMES[layout]} sinusoid by {float((table[row] - expected).abs().max()):.3g} at column "
        f"{column} (found {float(table[row, column]):.6g}, expected {float(expected[column]):.6g}), more than float32 "
        f"rounding allows at that position ({float(bound[row, 0]):.2g}){instead}. The converted model computes that "
        "sinusoid; it cannot reproduce these positions")


__all__ = ["check_sinusoid_table", "rounding_bound"]
