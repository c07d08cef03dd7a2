"""The RNN decoder's state and what advances it: the cache ``generate()`` carries, the decoding step's fast path, and
the two ways of running that step under other machinery (torch.compile, gradient checkpointing).

- ``RNNSeq2SeqCache``: the recurrent state as a transformers ``Cache`` of batch-first tensors, reordered for beam
  search.
- ``run_rnn``: one call of the decoder RNN from the cache's state. A single decoding step takes the fast path,
  ``step_cells``: the fused cell kernels, layer by layer.
- ``allow_rnn``: dynamo's switch that lets torch.compile trace that fast path (``get_compiled_call``).
- ``RNNSeq2SeqDecoderStep``: one decoder call as a pure function of the state's tensors, what gradient
  checkpointing recomputes.

Copied into saved model folders beside modeling_rnn_seq2seq.py, which imports it: imports nothing from hf_s2s.

Shapes: B batch (x beams in generate), S source length, T target length, L decoder layers, E encoder output size,
H decoder_hidden_size, A attention size, D_in the decoder RNN's input size.
"""

from collections.abc import Callable

import torch
from torch import nn
from transformers import Cache
from transformers.modeling_layers import GradientCheckpointingLayer


class RNNSeq2SeqCache(Cache):
    """The decoder state carried through ``generate()``: batch-first tensors, reordered together for beam search.

    hidden, cell (B, L, H) (cell only for LSTM); input_feed (B, H) the previous attentional vector (Luong input
    feeding); memory (B, S, E) and source_mask (B, S) from the encoder; keys (B, S, A): the source-side half of the
    attention score (e.g. W_h h_i; multi-head: (B, 2, heads, S, E / heads), the keys and values), computed ONCE per
    source when the cache is filled; context (B, E) the fixed context of the attention-free model. ``seen_tokens``
    counts decoder inputs consumed.
    """

    is_compileable = False  # per instance: see __init__
    _TENSORS = ("hidden", "cell", "input_feed", "memory", "source_mask", "keys", "context")
    # What depends on the source only: identical across the beams of one sentence.
    _SOURCE_TENSORS = ("memory", "source_mask", "keys", "context")

    def __init__(self, compileable: bool = False):
        """``compileable=True`` (what ``generate(cache_implementation="static")`` builds): generate() may compile
        the decoding step (torch.compile, CUDA graphs on a GPU). The state has a fixed size anyway; only the token
        count changes, so it is then kept in a tensor instead of a Python int, which a compiled step would
        specialise on (one recompilation per token)."""
        super().__init__(layers=[])
        self.is_compileable = compileable
        self.reset()

    @classmethod
    def from_tensors(cls, *tensors: torch.Tensor | None) -> "RNNSeq2SeqCache":
        """A cache holding ``tensors``, given in the order of :meth:`tensors`."""
        cache = cls()
        for name, tensor in zip(cls._TENSORS, tensors, strict=True):
            setattr(cache, name, tensor)
        return cache

    def tensors(self) -> tuple[torch.Tensor | None, ...]:
        """The state's tensors: hidden, cell, input_feed, memory, source_mask, keys, context."""
        return tuple(getattr(self, name) for name in self._TENSORS)

    def reset(self):
        for name in self._TENSORS:
            setattr(self, name, None)
        self.restart_count()

    def restart_count(self, device: torch.device | None = None) -> None:
        """No decoder input consumed yet: the count is 0 (a tensor on ``device`` when compileable)."""
        self._seen_tokens = torch.zeros((), dtype=torch.long, device=device) if self.is_compileable else 0

    @property
    def seen_tokens(self) -> int:
        return int(self._seen_tokens)

    def advance(self, num_tokens: int) -> None:
        """Count ``num_tokens`` more decoder inputs consumed."""
        if self.is_compileable:
            self._seen_tokens.add_(num_tokens)
        else:
            self._seen_tokens += num_tokens

    @property
    def is_initialized(self) -> bool:
        return self.hidden is not None

    @property
    def is_croppable(self) -> bool:
        return False  # a recurrent state cannot be rolled back (no assisted decoding)

    @property
    def batch_size(self) -> int:
        return self.hidden.shape[0] if self.hidden is not None else -1

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        for name in self._TENSORS:
            tensor = getattr(self, name)
            if tensor is not None:
                setattr(self, name, fn(tensor))

    def reorder_cache(self, beam_idx: torch.LongTensor):
        """Beam search: row i of the new decoder state is row beam_idx[i] of the old one. generate() only moves
        rows among the beams of one sentence, whose source-side tensors (memory, mask, keys, context) are equal
        rows, so those are not copied: every step would otherwise gather the whole (B x beams, S, E) memory."""
        for name in self._TENSORS:
            tensor = getattr(self, name)
            if tensor is not None and name not in self._SOURCE_TENSORS:
                setattr(self, name, tensor.index_select(0, beam_idx.to(tensor.device)))

    def batch_repeat_interleave(self, repeats: int):
        self._map(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor):
        self._map(lambda t: t[indices.to(t.device)])

    def crop(self, tokens_to_remove: int):
        raise NotImplementedError("RNNSeq2SeqCache holds a recurrent state and cannot be cropped")

    def __repr__(self):
        return (f"RNNSeq2SeqCache(seen_tokens={self.seen_tokens}, batch_size={self.batch_size}, "
                f"compileable={self.is_compileable})")


# ----------------------------------------------------------------------------------------------------------
# Running the decoder RNN from the state
# ----------------------------------------------------------------------------------------------------------


def run_rnn(rnn: nn.Module, inputs: torch.Tensor, state: RNNSeq2SeqCache) -> torch.Tensor:
    """One call of the decoder RNN over inputs (B, T, D_in) from ``state``; updates state.hidden/cell in place.
    Returns the top layer's outputs (B, T, H). A single decoding step (T = 1, eval) takes the fast path,
    ``step_cells``."""
    # The cell kernels read the module's weights directly, so not where accelerate's offloading hook brings the
    # weights in around the module's own call, nor on a quantized replacement module (no plain weights).
    if inputs.shape[1] == 1 and not rnn.training and type(rnn) in (nn.GRU, nn.LSTM) and not hasattr(rnn, "_hf_hook"):
        return step_cells(rnn, inputs[:, 0], state)[:, None]  # (B, 1, H)
    hidden = state.hidden.transpose(0, 1).contiguous()  # (L, B, H)
    if state.cell is not None:
        outputs, (hidden, cell) = rnn(inputs, (hidden, state.cell.transpose(0, 1).contiguous()))
        state.cell = cell.transpose(0, 1)  # (B, L, H)
    else:
        outputs, hidden = rnn(inputs, hidden)
    state.hidden = hidden.transpose(0, 1)  # (B, L, H)
    return outputs


def step_cells(rnn: nn.GRU | nn.LSTM, inputs: torch.Tensor, state: RNNSeq2SeqCache) -> torch.Tensor:
    """One time step of ``rnn`` (eval mode: no dropout between layers) layer by layer with the fused cell kernels
    (``torch.gru_cell`` / ``torch.lstm_cell``, the module's own weights): the same recurrence as calling the module
    on a length-1 sequence, without its per-call setup and (L, B, H) transposes, and traceable by torch.compile,
    which cannot capture nn.GRU / nn.LSTM. inputs (B, D_in) -> the top layer's output (B, H); updates state."""
    hidden, cell = [], []
    for k in range(rnn.num_layers):
        weights = rnn.all_weights[k]  # [w_ih, w_hh] (+ [b_ih, b_hh] with biases) of layer k
        if state.cell is not None:
            h, c = torch.lstm_cell(inputs, (state.hidden[:, k], state.cell[:, k]), *weights)  # (B, H) each
            cell.append(c)
        else:
            h = torch.gru_cell(inputs, state.hidden[:, k], *weights)  # (B, H)
        hidden.append(h)
        inputs = h
    state.hidden = torch.stack(hidden, dim=1)  # (B, L, H)
    state.cell = torch.stack(cell, dim=1) if cell else None
    return inputs


def allow_rnn(compiled: Callable) -> Callable:
    """``compiled`` (transformers' compiled forward) traced with dynamo's ``allow_rnn``: decoding steps run the
    cells through ``torch.gru_cell`` / ``torch.lstm_cell`` (``step_cells``), but dynamo refuses a graph that merely
    holds an nn.GRU / nn.LSTM (their weights live there) unless that switch is on."""

    def call(*args, **kwargs):
        with torch._dynamo.config.patch(allow_rnn=True):
            return compiled(*args, **kwargs)

    return call


class RNNSeq2SeqDecoderStep(GradientCheckpointingLayer):
    """The unit transformers' gradient checkpointing recomputes: one ``RNNSeq2SeqDecoder.run`` as a pure function
    of the recurrent state. Checkpointing runs the function again in the backward pass, so it cannot advance a
    cache in place: it takes the state's tensors (positional, so reentrant checkpointing tracks them), runs the
    decoder on a scratch cache holding them, and returns the new recurrent ones. It holds no parameters (they stay
    where checkpoints name them, in the decoder); the decoder passes itself as ``decoder``."""

    def forward(self, embeds: torch.Tensor, *state_tensors: torch.Tensor | None, decoder: nn.Module):
        """embeds (B, T, D), the state's tensors (``RNNSeq2SeqCache.tensors``) -> readout (B, T, H), attention
        weights (B, heads, T, S) or None, and the new hidden, cell and input_feed."""
        scratch = RNNSeq2SeqCache.from_tensors(*state_tensors)
        readout, weights = decoder.run(embeds, scratch)
        return readout, weights, scratch.hidden, scratch.cell, scratch.input_feed


__all__ = ["RNNSeq2SeqCache", "RNNSeq2SeqDecoderStep", "allow_rnn", "run_rnn", "step_cells"]
