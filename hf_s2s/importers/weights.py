"""A toolkit checkpoint's tensors under hf_s2s's names, and loading them into the model.

- :class:`Tensors` hands out a checkpoint's tensors by the toolkit's name and remembers what it handed out: a
  name the checkpoint lacks, a tensor that is not finite, and whatever is left unmapped at the end are errors
  naming the tensor.
- :class:`LayerMapping` is one toolkit's names for the modules of a Transformer layer, as data (eole's
  ``HF_mappings``): each hf_s2s module takes the weights and biases of one toolkit module, or of several
  concatenated along the output dimension (separate query, key and value projections into hf_s2s's fused
  ones). :func:`map_layers` is the one loop that applies every toolkit's table.
- :func:`load_converted` loads the mapped tensors, refusing a shape that differs and a parameter left without
  a value; a parameter tied to another (a shared token table, a tied output layer) takes its value from that
  one.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from .checkpoints import CheckpointError


class Tensors:
    """A checkpoint's tensors, taken one by one by name (as float32); ``what`` names the model in errors, e.g.
    "an OpenNMT-py Transformer of these options"."""

    def __init__(self, state: dict, what: str, ignore: Iterable[str] = ()):
        self.what = what
        self.left = {name: tensor for name, tensor in state.items()
                     if not any(name.endswith(suffix) for suffix in ignore)}
        wrong = sorted(name for name, value in self.left.items() if not isinstance(value, torch.Tensor))
        if wrong:
            kind = type(self.left[wrong[0]]).__name__
            raise CheckpointError(f"the checkpoint's weights hold {wrong[:3]} as {kind}, not tensors: the "
                                  "file is damaged, or not a checkpoint of this toolkit")

    def __call__(self, name: str) -> torch.Tensor:
        if name not in self.left:
            raise CheckpointError(f"the checkpoint lacks {name}, which {self.what} has")
        tensor = self.left.pop(name)
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            bad = int((~torch.isfinite(tensor)).sum())
            raise CheckpointError(f"the checkpoint's {name} holds {bad} non-finite value(s) (NaN or inf) of "
                                  f"{tensor.numel()}: a model that diverged in training, or a damaged file; "
                                  "the converter refuses to write it")
        return tensor.float()

    def has(self, name: str) -> bool:
        return name in self.left

    def bias_or_zeros(self, name: str, weight: torch.Tensor) -> torch.Tensor:
        """The bias ``name``, or zeros of ``weight``'s output size where the checkpoint has none (a Linear
        built without a bias computes the same as one with a zero bias)."""
        return self(name) if self.has(name) else weight.new_zeros(weight.shape[0])

    def finish(self) -> None:
        """Refuse whatever tensor is left unmapped, naming it."""
        if self.left:
            raise CheckpointError(f"the checkpoint holds parameters this converter does not know: "
                                  f"{sorted(self.left)[:5]}; they belong to an option it does not support")


@dataclass(frozen=True)
class LayerMapping:
    """One toolkit's names for a Transformer layer: ``modules`` maps each hf_s2s module (under ``target``) to
    the toolkit module(s) (under ``source``) whose ``.weight`` and ``.bias`` it takes, concatenated in the
    order given. ``{layer}`` in ``source`` and ``target`` is the layer's index. The modules in
    ``optional_bias`` may lack a bias in the checkpoint (zeros then)."""

    source: str
    target: str
    modules: dict[str, tuple[str, ...]]
    optional_bias: frozenset[str] = field(default_factory=frozenset)


def map_layers(tensors: Tensors, mapping: LayerMapping, layers: int) -> dict[str, torch.Tensor]:
    """Every layer's tensors under hf_s2s's names, by ``mapping``."""
    out = {}
    for layer in range(layers):
        source, target = mapping.source.format(layer=layer), mapping.target.format(layer=layer)
        for ours, theirs in mapping.modules.items():
            weights = [tensors(f"{source}.{name}.weight") for name in theirs]
            if ours in mapping.optional_bias:
                biases = [tensors.bias_or_zeros(f"{source}.{name}.bias", weight)
                          for name, weight in zip(theirs, weights, strict=True)]
            else:
                biases = [tensors(f"{source}.{name}.bias") for name in theirs]
            out[f"{target}.{ours}.weight"] = torch.cat(weights)
            out[f"{target}.{ours}.bias"] = torch.cat(biases)
    return out


def check_same(tables: dict[str, torch.Tensor], option: str) -> None:
    """Refuse tables that the toolkit's ``option`` ties (one tensor in the toolkit) but that differ in the
    checkpoint: ``tables`` maps each toolkit name to its tensor."""
    (first, reference), *others = tables.items()
    for name, tensor in others:
        if tensor.shape != reference.shape or not torch.equal(tensor, reference):
            raise CheckpointError(f"{option} ties {first} and {name}, but the checkpoint holds different "
                                  "values for them: the options do not belong to these weights")


def aliases(model: nn.Module) -> dict[str, str]:
    """Each parameter name of ``model``'s state dict that is another name of an earlier one (a tied weight),
    mapped to that earlier name."""
    first, out = {}, {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in first:
            out[name] = first[id(tensor)]
        else:
            first[id(tensor)] = name
    return out


def load_converted(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load ``state`` (hf_s2s names) into ``model``: every tensor must fit its parameter's shape and every
    parameter get a value, itself or through the parameter it is tied to; tied parameters given twice must
    agree."""
    expected = model.state_dict()
    tied = aliases(model)
    unexpected = sorted(set(state) - set(expected))
    wrong = [f"{name} {tuple(tensor.shape)} (the model's is {tuple(expected[name].shape)})"
             for name, tensor in state.items() if name in expected and tensor.shape != expected[name].shape]
    missing = sorted(name for name in expected if name not in state and tied.get(name) not in state)
    if unexpected or wrong or missing:
        raise CheckpointError(f"conversion mismatch: missing {missing}, unexpected {unexpected}, wrong "
                              f"shapes {wrong}")
    for name, origin in tied.items():
        if name in state and origin in state and not torch.equal(state[name], state[origin]):
            raise CheckpointError(f"{name} and {origin} are one tensor in the converted model, but "
                                  "the checkpoint gives them different values")
    model.load_state_dict(state, strict=False)


__all__ = ["LayerMapping", "Tensors", "aliases", "check_same", "load_converted", "map_layers"]
