"""ONNX export of both families: an encoder graph and a decoder-step graph whose cache is explicit inputs and outputs,
so that a loop outside PyTorch (:mod:`hf_s2s.inference.onnx_runtime`: numpy + onnxruntime) decodes greedy or beam
search as ``generate()`` does.

The graphs, for a batch of B rows (sentences x beams), S source positions:

- ``encoder.onnx``: ``input_ids``, ``attention_mask`` (B, S), right-padded -> everything a decoding step reads
  about the source, computed once per source (outputs named as the step inputs they feed), and the decoder state
  before the first step (``past_*``).
- ``decoder_step.onnx``: ``input_ids`` (B, 1) the previous token, ``attention_mask`` (B, S), the source-side
  tensors, and the state ``past_*`` -> ``logits`` (B, V) of the next token and the state after the step
  (``present_*``, each replacing its ``past_*`` at the next step; beam search reorders their rows).

What the source side and the state are, per family:

- Transformer: source side ``cross_key_<i>`` / ``cross_value_<i>`` (B, heads, S, d_h) per decoder layer i, the
  cross-attention keys and values (the encoder output itself is not needed once they are projected); state
  ``past_key_<i>`` / ``past_value_<i>`` (B, heads, T, d_h), the self-attention cache of the T tokens decoded so far
  (T = 0 before the first step).
- RNN: source side ``memory`` (B, S, E) the encoder states and ``keys``, the attention's precomputed source half
  (``project_keys``), or, without attention, ``context`` (B, E) the final encoder state; state ``past_hidden``
  (B, L, H), ``past_cell`` (LSTM), ``past_input_feed`` (B, H) (Luong input feeding).

Every axis named B, S, T above is dynamic. The wrappers call the model's own submodules (embeddings, attention
modules, layers, RNN weights, output layer) with explicit tensors. The RNN encoder does not pack the padded batch
(``pack_padded_sequence`` cannot be captured): each direction of each layer runs over the padded batch, the
backward one over each row reversed within its length (:func:`reverse_within_lengths`), so padding comes after a
row's real tokens in both directions and never reaches them; the states at padding are zeroed as the packed encoder
leaves them. tests/test_onnx.py proves the graphs' tokens equal to ``generate()``'s.

The export writes beside the graphs the folder's tokenizer, its generation config (completed with the length bound
it decodes with), ``onnx_runtime.py`` and ``decoding.py`` (copies of the runtime and of what it shares with every
engine, which import neither torch nor hf_s2s) and ``onnx_manifest.json``, which names each graph's inputs and
outputs, which outputs carry the state, and the model's position table (what the runtime's length default and
source limit read); and last the record of every file it wrote, by sha256 (:mod:`hf_s2s.models.output_record`):
``overwrite`` replaces an earlier export only while its files are unchanged and the folder holds nothing else.
"""

import copy
import importlib.util
import inspect
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from torch._higher_order_ops.scan import scan
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from ..models.modeling_common import DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B
from ..models.modeling_rnn_seq2seq import RNNSeq2SeqCache
from ..models.output_record import check_output_folder, clear_output, record_output
from . import decoding, onnx_runtime
from .decoding import check_settings
from .onnx_runtime import MANIFEST_FILE, MANIFEST_FORMAT
from .translate import generation_settings, position_limit

COMMAND = "export-onnx"  # the command whose output the folder's record names
OVERWRITE_FLAG = "--overwrite_output_dir (overwrite=True)"

ENCODER_FILE, DECODER_STEP_FILE = "encoder.onnx", "decoder_step.onnx"
# Example shapes the graphs are traced with. torch.export specialises a dimension of size 0 or 1, so every dynamic
# axis gets 2 or more here; the graphs then take any size, 0 decoded tokens and 1 row included.
_EXAMPLE_BATCH, _EXAMPLE_SOURCE, _EXAMPLE_PAST = 2, 5, 3


@dataclass
class GraphSpec:
    """One graph to export: the wrapper, example inputs (by name, in the wrapper's argument order), its output names
    and each input's dynamic axes ({axis: name}; B, S and T are shared across inputs)."""

    module: nn.Module
    inputs: dict[str, torch.Tensor]
    outputs: list[str]
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------- Transformer


class TransformerEncoderForOnnx(nn.Module):
    """input_ids, attention_mask (B, S) -> cross_key_<i>, cross_value_<i> (B, heads, S, d_h) for each decoder layer,
    then past_key_<i>, past_value_<i> (B, heads, 0, d_h): the empty self-attention cache."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.encoder = model.get_encoder()
        self.cross_attentions = nn.ModuleList(layer.encoder_attn for layer in model.get_decoder().layers)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        memory = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, S, D)
        cross, past = [], []
        for attention in self.cross_attentions:
            batch, length = memory.shape[:2]
            keys_values = attention.kv_proj(memory).view(batch, length, 2, attention.num_heads, attention.head_dim)
            keys, values = keys_values.permute(2, 0, 3, 1, 4)  # (B, heads, S, d_h) each
            cross += [keys, values]
            past += [keys[:, :, :0], values[:, :, :0]]  # (B, heads, 0, d_h)
        return (*cross, *past)


class TransformerDecoderStepForOnnx(nn.Module):
    """One cached decoding step: the model's decoder over an ``EncoderDecoderCache`` filled from the inputs (its
    cross-attention half marked as computed, so the step reads the keys and values given), then the output layer.
    Arguments: input_ids (B, 1), attention_mask (B, S), cross keys and values of every layer, past keys and values
    of every layer; returns logits (B, V), then present keys and values (B, heads, T + 1, d_h) of every layer."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.config = model.config
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        self.layers = self.config.decoder_layers

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *tensors: torch.Tensor):
        cross, past = tensors[: 2 * self.layers], tensors[2 * self.layers:]
        cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        for layer in range(self.layers):
            cache.self_attention_cache.update(past[2 * layer], past[2 * layer + 1], layer)
            cache.cross_attention_cache.update(cross[2 * layer], cross[2 * layer + 1], layer)
            cache.is_updated[layer] = True
        keys = cross[0]  # (B, heads, S, d_h): the encoder output's shape, which the cross-attention mask is built for
        encoder_shaped = keys.transpose(1, 2).reshape(keys.shape[0], keys.shape[2], -1)  # (B, S, heads x d_h)
        hidden = self.decoder(input_ids=input_ids, encoder_hidden_states=encoder_shaped,
                              encoder_attention_mask=attention_mask, cache=cache, use_cache=True).last_hidden_state
        logits = self.lm_head(hidden[:, -1])  # (B, V)
        presents = []
        for layer in cache.self_attention_cache.layers:
            presents += [layer.keys, layer.values]  # (B, heads, T + 1, d_h)
        return (logits, *presents)


def _transformer_graphs(model: nn.Module) -> tuple[GraphSpec, GraphSpec]:
    config = model.config
    heads = config.decoder_attention_heads
    head_dim = config.d_model // heads
    layers = range(config.decoder_layers)
    cross = [f"cross_{kind}_{i}" for i in layers for kind in ("key", "value")]
    past = [f"past_{kind}_{i}" for i in layers for kind in ("key", "value")]
    present = [name.replace("past_", "present_") for name in past]

    input_ids, attention_mask = _example_source(config)
    batch_source = {0: "batch", 1: "source_length"}
    encoder = GraphSpec(TransformerEncoderForOnnx(model), {"input_ids": input_ids, "attention_mask": attention_mask},
                        cross + past, {"input_ids": batch_source, "attention_mask": batch_source})
    generator = torch.Generator().manual_seed(0)

    def example(length):
        return torch.randn(_EXAMPLE_BATCH, heads, length, head_dim, generator=generator)

    step_inputs = {"input_ids": _example_tokens(config), "attention_mask": attention_mask,
                   **{name: example(_EXAMPLE_SOURCE) for name in cross},
                   **{name: example(_EXAMPLE_PAST) for name in past}}
    step_axes = {"input_ids": {0: "batch"}, "attention_mask": batch_source,
                 **{name: {0: "batch", 2: "source_length"} for name in cross},
                 **{name: {0: "batch", 2: "past_length"} for name in past}}
    step = GraphSpec(TransformerDecoderStepForOnnx(model), step_inputs, ["logits", *present], step_axes)
    return encoder, step


# ---------------------------------------------------------------------------------------------------- RNN

# The decoder state's tensors (RNNSeq2SeqCache): what a step reads about the source, then what it advances.
RNN_SOURCE_FIELDS = ("memory", "keys", "context")
RNN_STATE_FIELDS = ("hidden", "cell", "input_feed")


# scan: torch's scan operator, which torch.export captures and the exporter writes as an ONNX Scan; torch 2.13 has no
# public name for it.


def run_direction(rnn: nn.GRU | nn.LSTM, index: int, inputs: torch.Tensor, lengths: torch.Tensor, reverse: bool):
    """One direction of one layer of ``rnn`` (``rnn.all_weights[index]``) over a right-padded batch, as over the
    packed batch: each step updates only the rows it is a real token of (t < length), so the state passes the
    padding unchanged; the backward direction (``reverse``) thus starts at each row's last real token. The fused
    cell kernels (``torch.gru_cell`` / ``torch.lstm_cell``) under torch's ``scan`` operator, which the exporter
    writes as an ONNX Scan over the time axis (a Python loop would be unrolled to the example's length).

    inputs (B, S, F), lengths (B,) -> outputs (B, S, h) (at padding: the state carried through, to be masked),
    final state: h (B, h), or (h, c) for an LSTM, each row's state after its last real token (zeros for length 0).
    """
    weights = rnn.all_weights[index]  # [w_ih, w_hh] (+ [b_ih, b_hh])
    lstm = isinstance(rnn, nn.LSTM)
    steps = torch.arange(inputs.shape[1], device=inputs.device)  # (S,)
    sequence = inputs.transpose(0, 1)  # (S, B, F)
    if reverse:
        sequence, steps = sequence.flip(0), steps.flip(0)

    def step(state, step_inputs):
        x, t = step_inputs  # (B, F), ()
        real = (t < lengths)[:, None]  # (B, 1)
        if lstm:
            h, c = torch.lstm_cell(x, state, *weights)
            state = (torch.where(real, h, state[0]), torch.where(real, c, state[1]))
            return state, state[0].clone()
        state = torch.where(real, torch.gru_cell(x, state, *weights), state)  # (B, h)
        return state, state.clone()

    zeros = inputs.new_zeros(inputs.shape[0], rnn.hidden_size)  # (B, h)
    final, outputs = scan(step, (zeros, zeros.clone()) if lstm else zeros, (sequence, steps))  # outputs (S, B, h)
    if reverse:
        outputs = outputs.flip(0)
    return outputs.transpose(0, 1), final


class RNNEncoderForOnnx(nn.Module):
    """input_ids, attention_mask (B, S), right-padded -> the decoder state before the first step, as the model's
    encoder and ``decoder.init_state`` make it: the source side (``memory`` (B, S, E), zero on padding, and
    ``keys``, the attention's precomputed source half; without attention ``context`` (B, E)), then ``hidden`` (B, L,
    H), ``cell`` (LSTM) and ``input_feed`` (B, H, input feeding). The encoder RNN runs layer by layer and direction
    by direction (:func:`run_direction`) instead of over a packed batch; its output feeds the decoder's own
    ``init_state``. ``fields``: the names of the cache tensors this configuration has (:meth:`encode` tells)."""

    def __init__(self, model: nn.Module, fields: tuple[str, ...] = ()):
        super().__init__()
        encoder = model.get_encoder()
        if type(encoder.rnn) not in (nn.GRU, nn.LSTM):
            raise ValueError(f"ONNX export needs the float model's nn.GRU / nn.LSTM, got {type(encoder.rnn).__name__} "
                             "(export the model before quantizing it)")
        self.embed_tokens, self.rnn = encoder.embed_tokens, encoder.rnn
        self.decoder = model.base_model.decoder
        # the decoder inits that start from the encoder's final states (OpenNMT-py's) read them from init_state's
        # final_states; the others ignore it
        self.takes_final_states = "final_states" in inspect.signature(self.decoder.init_state).parameters
        self.fields = fields

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> RNNSeq2SeqCache:
        rnn = self.rnn
        directions = 2 if rnn.bidirectional else 1
        mask = attention_mask.bool()  # (B, S)
        lengths = mask.sum(dim=1)  # (B,)
        states = self.embed_tokens(input_ids)  # (B, S, D)
        final_hidden, final_cell = [], []  # per (layer, direction), nn.GRU / nn.LSTM's order
        for layer in range(rnn.num_layers):
            outputs = []
            for direction in range(directions):
                output, final = run_direction(rnn, layer * directions + direction, states, lengths, direction == 1)
                outputs.append(output)
                final_hidden.append(final[0] if isinstance(final, tuple) else final)
                if isinstance(final, tuple):
                    final_cell.append(final[1])
            states = torch.cat(outputs, dim=-1)  # (B, S, E): the next layer's input (no dropout in eval mode)
        memory = states * mask[:, :, None].to(states.dtype)  # (B, S, E), zero on padding
        final_states = {}
        if self.takes_final_states:  # (B, layers x directions, h) each, as RNNSeq2SeqEncoderOutput has them
            final_states["final_states"] = (torch.stack(final_hidden, dim=1),
                                            torch.stack(final_cell, dim=1) if final_cell else None)
        return self.decoder.init_state(memory, mask, RNNSeq2SeqCache(), **final_states)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        state = self.encode(input_ids, attention_mask)
        return tuple(getattr(state, name) for name in self.fields)


class RNNDecoderStepForOnnx(nn.Module):
    """One decoding step: the model's decoder on an ``RNNSeq2SeqCache`` filled from the inputs, then the output
    layer. Arguments: input_ids (B, 1), attention_mask (B, S), then the cache tensors named by ``fields`` (the
    source side, then the state); returns logits (B, V) and the state after the step (the ``fields`` among
    RNN_STATE_FIELDS, in order)."""

    def __init__(self, model: nn.Module, fields: tuple[str, ...]):
        super().__init__()
        if type(model.base_model.decoder.rnn) not in (nn.GRU, nn.LSTM):
            raise ValueError("ONNX export needs the float model's nn.GRU / nn.LSTM, got "
                             f"{type(model.base_model.decoder.rnn).__name__} (export the model before quantizing it)")
        self.decoder = model.base_model.decoder
        self.lm_head = model.get_output_embeddings()
        self.fields = fields

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *tensors: torch.Tensor):
        state = RNNSeq2SeqCache()
        for name, tensor in zip(self.fields, tensors, strict=True):
            setattr(state, name, tensor)
        state.source_mask = attention_mask.bool()  # (B, S)
        readout, _ = self.decoder(input_ids=input_ids, state=state)  # (B, 1, H); advances the state
        return (self.lm_head(readout[:, -1]), *(getattr(state, name) for name in self.fields
                                                if name in RNN_STATE_FIELDS))


def _source_axes(short: torch.Tensor, long: torch.Tensor) -> dict[int, str]:
    """A cache tensor's dynamic axes: 0 the batch, and the source length wherever the tensors of two examples one
    source token apart differ (memory (B, S, E): 1; multi-head keys (B, 2, heads, S, d): 3; context: none)."""
    lengths = {axis: "source_length" for axis, (a, b) in enumerate(zip(short.shape, long.shape, strict=True)) if a != b}
    return {0: "batch", **lengths}


def _rnn_graphs(model: nn.Module) -> tuple[GraphSpec, GraphSpec]:
    config = model.config
    input_ids, attention_mask = _example_source(config)
    with torch.no_grad():
        examples = [RNNEncoderForOnnx(model).eval().encode(*_example_source(config, length))
                    for length in (_EXAMPLE_SOURCE, _EXAMPLE_SOURCE + 1)]
    fields = tuple(name for name in RNN_SOURCE_FIELDS + RNN_STATE_FIELDS if getattr(examples[0], name) is not None)
    axes = {name: _source_axes(getattr(examples[0], name), getattr(examples[1], name)) for name in fields}
    io_names = {name: name if name in RNN_SOURCE_FIELDS else f"past_{name}" for name in fields}
    batch_source = {0: "batch", 1: "source_length"}
    encoder = GraphSpec(RNNEncoderForOnnx(model, fields), {"input_ids": input_ids, "attention_mask": attention_mask},
                        [io_names[name] for name in fields],
                        {"input_ids": batch_source, "attention_mask": batch_source})
    step_inputs = {"input_ids": _example_tokens(config), "attention_mask": attention_mask,
                   **{io_names[name]: getattr(examples[0], name) for name in fields}}
    step_axes = {"input_ids": {0: "batch"}, "attention_mask": batch_source,
                 **{io_names[name]: axes[name] for name in fields}}
    present = [f"present_{name}" for name in fields if name in RNN_STATE_FIELDS]
    step = GraphSpec(RNNDecoderStepForOnnx(model, fields), step_inputs, ["logits", *present], step_axes)
    return encoder, step


# ---------------------------------------------------------------------------------------------------- export

_GRAPHS = {"transformer_seq2seq": _transformer_graphs, "rnn_seq2seq": _rnn_graphs}


def _example_source(config, length: int = _EXAMPLE_SOURCE) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded example batch (B, S): the second row one token shorter."""
    input_ids = torch.full((_EXAMPLE_BATCH, length), min(4, config.vocab_size - 1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, -1] = 0
    return input_ids.masked_fill(attention_mask == 0, config.pad_token_id or 0), attention_mask


def _example_tokens(config) -> torch.Tensor:
    return torch.full((_EXAMPLE_BATCH, 1), config.decoder_start_token_id or 0)  # (B, 1)


def graph_specs(model: nn.Module) -> tuple[GraphSpec, GraphSpec]:
    """The encoder and decoder-step graphs of ``model`` (either family), wrappers in eval mode."""
    model_type = model.config.model_type
    if model_type not in _GRAPHS:
        raise ValueError(f"ONNX export covers the model types {', '.join(_GRAPHS)}; got {model_type!r}")
    if model.training:
        raise ValueError("export a model in eval mode (model.eval()): dropout would be traced into the graphs")
    encoder, step = _GRAPHS[model_type](model)
    encoder.module.eval()
    step.module.eval()
    return encoder, step


def _export_graph(spec: GraphSpec, path: Path) -> None:
    dims: dict[str, torch.export.Dim] = {}
    shapes = [{axis: dims.setdefault(dim, torch.export.Dim(dim))
               for axis, dim in spec.dynamic_axes.get(name, {}).items()} for name in spec.inputs]
    # in argument order; the step wrappers take their cache tensors as *tensors, one argument for torch.export
    named = sum(p.kind == p.POSITIONAL_OR_KEYWORD for p in inspect.signature(spec.module.forward).parameters.values())
    dynamic_shapes = [*shapes[:named], tuple(shapes[named:])] if len(shapes) > named else shapes
    with torch.no_grad():
        torch.onnx.export(
            spec.module, tuple(spec.inputs.values()), str(path), dynamo=True, external_data=False, verbose=False,
            input_names=list(spec.inputs), output_names=spec.outputs, dynamic_shapes=dynamic_shapes,
        )
    _tidy_graph(path)


def _tidy_graph(path: Path) -> None:
    """What the exporter leaves that makes onnxruntime warn each time it loads or runs the graph."""
    import onnx

    model = onnx.load(str(path))
    _drop_unused_initializers(model.graph)
    _free_traced_sizes(model)
    onnx.save(model, str(path))


def _drop_unused_initializers(graph) -> set[str]:
    """Remove the initializers no node reads (the exporter leaves one beside a Scan); returns the names ``graph`` and
    its subgraphs (Scan bodies, which may read the outer graph's initializers) read."""
    import onnx

    read = {output.name for output in graph.output}
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                read |= _drop_unused_initializers(attribute.g)
    unused = [initializer for initializer in graph.initializer if initializer.name not in read]
    for initializer in unused:
        graph.initializer.remove(initializer)
    return read


def _free_traced_sizes(model) -> None:
    """Give back their dynamic axes to tensors the exporter recorded with the example's size: it wrote the outputs of
    the RNN encoder's Scan, and everything computed from them, with the example's source length, so onnxruntime
    warned on every other length (the values were right). ONNX's own shape inference, run on the graph stripped of
    recorded shapes, proves such an axis to be a named input axis; the recorded shape is kept wherever it does not."""
    import onnx

    graph = model.graph
    recorded = {value.name: value for value in [*graph.value_info, *graph.output]}
    stripped = copy.deepcopy(model)
    del stripped.graph.value_info[:]
    for output in stripped.graph.output:
        for dim in output.type.tensor_type.shape.dim:
            dim.Clear()
    inferred = onnx.shape_inference.infer_shapes(stripped, data_prop=True).graph
    for value in [*inferred.value_info, *inferred.output]:
        if value.name not in recorded:
            continue
        dims = recorded[value.name].type.tensor_type.shape.dim
        proved = value.type.tensor_type.shape.dim
        if len(dims) == len(proved):
            for dim, proof in zip(dims, proved, strict=True):
                if dim.HasField("dim_value") and proof.dim_param and not proof.dim_param.startswith("unk__"):
                    dim.dim_param = proof.dim_param  # a named axis of the graph's inputs


def _graph_entry(spec: GraphSpec, file: str) -> dict:
    """The manifest's description of one graph: file, inputs and outputs with their axes (a dynamic one by name)."""
    return {"file": file, "inputs": {name: _axes(tensor, spec.dynamic_axes.get(name, {}))
                                     for name, tensor in spec.inputs.items()},
            "outputs": spec.outputs}


def _axes(tensor: torch.Tensor, dynamic: dict[int, str]) -> dict:
    return {"dtype": str(tensor.dtype).removeprefix("torch."),
            "shape": [dynamic.get(axis, size) for axis, size in enumerate(tensor.shape)]}


def import_exporter() -> None:
    """Raise an ImportError saying how to install what the export needs (onnx, onnxscript) and what checks it
    (onnxruntime), before any work."""
    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"the ONNX export needs {', '.join(missing)}: pip install 'hf_s2s[onnx]'")


def check_export_options(output_dir: str | Path, overwrite: bool = False, model_dir: str | Path | None = None) -> None:
    """Refuse what would make an export fail or destroy files, before any work: missing packages, an ``output_dir``
    that is a file, is the model folder ``model_dir`` itself, or holds files, unless ``overwrite`` and they are an
    earlier export's, unchanged (:mod:`hf_s2s.models.output_record`), which the export then replaces."""
    import_exporter()
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"output_dir {output_dir} is a file, not a folder")
    if model_dir is not None and output_dir.resolve() == Path(model_dir).resolve():
        raise ValueError(f"output_dir {output_dir} is the model folder itself; choose another folder")
    check_output_folder(output_dir, COMMAND, OVERWRITE_FLAG, overwrite)


def _save_generation_config(model: nn.Module, output_dir: Path) -> None:
    """The model's generation config as generate() decodes with it: with the source-relative length bound written
    out (a config saved before the bound existed decodes with its defaults)."""
    config = copy.deepcopy(model.generation_config)
    config.max_len_a = getattr(config, "max_len_a", DEFAULT_MAX_LEN_A)
    config.max_len_b = getattr(config, "max_len_b", DEFAULT_MAX_LEN_B)
    config.save_pretrained(output_dir)


def export_onnx(model: nn.Module, output_dir: str | Path, tokenizer=None, overwrite: bool = False) -> Path:
    """Write ``model`` (either family, eval mode, float32) to ``output_dir`` as ``encoder.onnx`` and
    ``decoder_step.onnx`` (see the module docstring), with its generation config, ``tokenizer`` (when given: what
    :class:`~hf_s2s.inference.onnx_runtime.OnnxSeq2Seq` translates text with), the runtime and the manifest.
    Returns the folder. A generation config the runtime cannot decode (a setting it does not implement, such as
    sampling or no_repeat_ngram_size) is refused by name before anything is written."""
    check_export_options(output_dir, overwrite)
    check_settings(generation_settings(model.generation_config), onnx_runtime.ENGINE, onnx_runtime.ONNX_SETTINGS)
    encoder, step = graph_specs(model)  # refuses a model it cannot export before any file is touched
    output_dir = Path(output_dir)
    if overwrite:
        clear_output(output_dir, COMMAND, OVERWRITE_FLAG)
    output_dir.mkdir(parents=True, exist_ok=True)
    _export_graph(encoder, output_dir / ENCODER_FILE)
    _export_graph(step, output_dir / DECODER_STEP_FILE)
    _save_generation_config(model, output_dir)
    for module in (onnx_runtime, decoding):  # the runtime and what it shares with every engine
        shutil.copyfile(module.__file__, output_dir / Path(module.__file__).name)
    if tokenizer is not None:
        tokenizer.save_pretrained(output_dir)
    past = [name for name in step.inputs if name.startswith("past_")]
    manifest = {
        "format": MANIFEST_FORMAT,
        "model_type": model.config.model_type,
        "encoder": _graph_entry(encoder, ENCODER_FILE),
        "decoder_step": _graph_entry(step, DECODER_STEP_FILE),
        # each step output that replaces a step input at the next step (the decoder state; beam search reorders it)
        "state": {name: name.replace("past_", "present_", 1) for name in past},
        "vocab_size": model.get_output_embeddings().out_features,
        # what the generation length and the source limit read of the model config, as translate() reads it
        "max_position_embeddings": getattr(model.config, "max_position_embeddings", None),
        "position_limit": position_limit(model.config),
        "tokenizer": tokenizer is not None,
    }
    (output_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    record_output(output_dir, COMMAND)  # what --overwrite_output_dir may replace, by content
    return output_dir


__all__ = [
    "GraphSpec",
    "RNNDecoderStepForOnnx",
    "RNNEncoderForOnnx",
    "TransformerDecoderStepForOnnx",
    "TransformerEncoderForOnnx",
    "check_export_options",
    "export_onnx",
    "graph_specs",
    "run_direction",
]
