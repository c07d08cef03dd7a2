"""int8 inference on CPU for both model families: dynamic quantization of the linear and recurrent layers.

:func:`quantize_int8` stores the weights of every ``nn.Linear`` (the output layer included), ``nn.GRU`` and
``nn.LSTM`` as int8 and quantizes their inputs on the fly at each call (dynamic quantization: no calibration
data, activations are scaled per call); embeddings, layer norms and attention arithmetic stay float32. The
result is an ordinary transformers model that the stock ``generate()`` drives (greedy, beam, sampling).

Why ``torch.ao.quantization.quantize_dynamic`` and not torchao's ``quantize_``: torchao (0.18) quantizes
``nn.Linear`` only (its default filter), so the recurrent layers that hold most of an RNN's weights would stay
float32; and on the Transformer its int8 CPU configs (``Int8DynamicActivationInt8WeightConfig``,
``Int8WeightOnlyConfig``, tensor subclasses dispatched from Python at every call) ran the benchmark's greedy
``generate()`` at 0.81-0.83x float32 where ``quantize_dynamic``'s fbgemm/x86 kernels ran it at 1.30x (README,
int8 section). torch marks ``torch.ao.quantization`` deprecated in favour of torchao, yet it ships and works in
torch 2.13; the deprecation warnings it emits on every call are silenced here (nothing a user of this function
can act on), and the tests fail loudly if a torch release removes it.

Dynamic quantization scales each layer's input by its largest value over the whole call, so a sentence's
activations are rounded differently in another batch: unlike float32, int8 translations can change with the
batch a sentence is decoded in (measured on the Multi30k Transformer: 166 of 1,000 greedy translations differ
between batches of 64 and one sentence at a time, at BLEU 29.52 and 29.60).

The name and the ``inplace=False`` default follow ``quantize_dynamic``'s; like transformers' quantized models,
the result says ``model.is_quantized`` (True), so ``Trainer`` refuses to fine-tune it and ``.half()`` /
``.float()`` refuse to cast it.
"""

import warnings

import torch
from torch import nn
from torch.ao.quantization import quantize_dynamic

# The layer types given int8 weights. Each becomes its torch.ao.nn.quantized.dynamic counterpart (Linear, GRU,
# LSTM), whose packed weights are int8 (torch.qint8).
QUANTIZED_LAYER_TYPES = (nn.Linear, nn.GRU, nn.LSTM)

# What torch prints on every quantize_dynamic call (see the module docstring).
_TORCH_AO_WARNINGS = (r"torch\.ao\.quantization is deprecated", r"torch\.quantize_per_tensor, torch\.quantize_per_channel")


def _refuse_training(module: nn.Module, args) -> None:
    """Forward pre-hook of an int8 model: its int8 weights have no gradients, so a training-mode forward would
    train the float32 embeddings alone and leave every quantized layer as it was."""
    if module.training:
        raise ValueError(
            f"this {type(module).__name__} has int8 weights (hf_s2s.quantize_int8) and runs inference only: call "
            ".eval() on it; to train, train the float32 model and quantize it afterwards"
        )


def _refuse_saving(*args, **kwargs):
    """``save_pretrained`` of an int8 model (torch's own fails deep inside with an AttributeError)."""
    raise ValueError("an int8 model (hf_s2s.quantize_int8) cannot be saved: torch's dynamic int8 layers have no "
                     "safetensors form; save the float32 model and call quantize_int8 after loading it")


def _check_quantizable(model: nn.Module) -> None:
    """Refuse, before any copy is made, what dynamic int8 quantization cannot take: a model already quantized,
    one not on the CPU, or one whose quantized layers are not float32."""
    if getattr(model, "is_quantized", False):
        raise ValueError(f"this {type(model).__name__} is already quantized (model.is_quantized is True)")
    devices = sorted({str(t.device) for t in (*model.parameters(), *model.buffers())} - {"cpu"})
    if devices:
        raise ValueError(
            f"quantize_int8 runs on the CPU only (torch's dynamic int8 kernels are CPU kernels); the model is on "
            f"{', '.join(devices)}: move it with model.to('cpu') first"
        )
    layers = [m for m in model.modules() if isinstance(m, QUANTIZED_LAYER_TYPES)]
    if not layers:
        raise ValueError(f"this {type(model).__name__} has no {', '.join(t.__name__ for t in QUANTIZED_LAYER_TYPES)} "
                         "layer: there is nothing to quantize")
    dtypes = sorted({str(p.dtype) for layer in layers for p in layer.parameters()} - {"torch.float32"})
    if dtypes:
        raise ValueError(f"quantize_int8 takes a float32 model; its layers hold {', '.join(dtypes)}: call "
                         "model.float() first")


def quantize_int8(model: nn.Module, *, inplace: bool = False) -> nn.Module:
    """``model`` for int8 inference on the CPU: every ``nn.Linear`` (output layer included), ``nn.GRU`` and
    ``nn.LSTM`` with int8 weights and dynamically quantized inputs. Returns the int8 model in eval mode; it
    generates with ``generate()`` as the float32 model does, and a forward in training mode is a ValueError.

    ``inplace=False`` (the default) leaves ``model`` untouched and quantizes a copy; ``inplace=True`` converts
    ``model`` itself (no second copy of the weights in memory) and returns it. A model not on the CPU, not
    float32, or already quantized is refused with a ValueError before anything is copied or changed."""
    _check_quantizable(model)
    with warnings.catch_warnings():
        for message in _TORCH_AO_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        quantized = quantize_dynamic(model, set(QUANTIZED_LAYER_TYPES), dtype=torch.qint8, inplace=inplace)
    quantized.eval()
    quantized.is_quantized = True
    quantized.register_forward_pre_hook(_refuse_training)
    quantized.save_pretrained = _refuse_saving  # an instance attribute: the float32 model's class is left alone
    return quantized


__all__ = ["QUANTIZED_LAYER_TYPES", "quantize_int8"]
