"""The models the benchmark compares, built to one set of dimensions (:class:`TransformerDims`), the training step
they all take (:func:`make_trainer`), and the peak memory of such training in a fresh process.

The sections (:mod:`.suites`, :mod:`.generation`, :mod:`.pipeline`) build their models here; this module sits
below them and imports none of them.
"""

import json
import os
import resource
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

import torch
from transformers import MarianConfig, MarianMTModel

from ..models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from ..models.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration
from ..models.modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration
from .measure import make_batches, model_inputs, set_threads
from .reference_rnn import TextbookRNNSeq2Seq

PAD, START, EOS = 0, 1, 2  # the token ids of every model and batch here


@dataclass
class TransformerDims:
    """Sizes shared by every model of a comparison (the issue's: 3+3 layers, d_model 256, 8 heads, FFN 512,
    vocabulary 8000, 256 positions; RNNs with 256 hidden units) and the training batch size."""

    vocab_size: int = 8000
    d_model: int = 256
    layers: int = 3
    heads: int = 8
    ffn_dim: int = 512
    max_positions: int = 256
    rnn_hidden: int = 256
    batch_size: int = 64


# ------------------------------------------------------------------------------------------------------ models


def build_hf_s2s_transformer(dims: TransformerDims, norm_position: str = "post") -> TransformerSeq2SeqForConditionalGeneration:
    """hf_s2s configured as Marian is: post-LN, sinusoidal positions, scaled embeddings, one shared tied table."""
    config = TransformerSeq2SeqConfig(
        vocab_size=dims.vocab_size, d_model=dims.d_model, encoder_layers=dims.layers, decoder_layers=dims.layers,
        encoder_attention_heads=dims.heads, decoder_attention_heads=dims.heads, encoder_ffn_dim=dims.ffn_dim,
        decoder_ffn_dim=dims.ffn_dim, activation_function="relu", dropout=0.1, attention_dropout=0.0,
        activation_dropout=0.0, norm_position=norm_position, position_embedding_type="sinusoidal",
        max_position_embeddings=dims.max_positions, scale_embedding=True, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, pad_token_id=PAD, bos_token_id=START, eos_token_id=EOS,
        decoder_start_token_id=START,
    )
    return TransformerSeq2SeqForConditionalGeneration(config)


def build_marian(dims: TransformerDims, **token_ids) -> MarianMTModel:
    """MarianMT of ``dims``, post-LN as Marian is; ``token_ids`` (pad/bos/eos/decoder start ids of a real tokenizer)
    replace the benchmark's synthetic ones."""
    ids = {"pad_token_id": PAD, "eos_token_id": EOS, "decoder_start_token_id": START, **token_ids}
    config = MarianConfig(
        vocab_size=dims.vocab_size, d_model=dims.d_model, encoder_layers=dims.layers, decoder_layers=dims.layers,
        encoder_attention_heads=dims.heads, decoder_attention_heads=dims.heads, encoder_ffn_dim=dims.ffn_dim,
        decoder_ffn_dim=dims.ffn_dim, activation_function="relu", dropout=0.1, attention_dropout=0.0,
        activation_dropout=0.0, max_position_embeddings=dims.max_positions, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, forced_eos_token_id=None, **ids,
    )
    return MarianMTModel(config)


def build_hf_s2s_rnn(dims: TransformerDims, cell_type: str, attention_type: str, **overrides
                     ) -> RNNSeq2SeqForConditionalGeneration:
    h = dims.rnn_hidden
    config = RNNSeq2SeqConfig(
        **{"vocab_size": dims.vocab_size, **overrides}, encoder_embedding_size=h, decoder_embedding_size=h, encoder_hidden_size=h,
        decoder_hidden_size=h, attention_size=h, cell_type=cell_type, attention_type=attention_type, dropout=0.1,
        pad_token_id=PAD, bos_token_id=START, eos_token_id=EOS, decoder_start_token_id=START,
    )
    return RNNSeq2SeqForConditionalGeneration(config)


def build_textbook_rnn(dims: TransformerDims, cell_type: str, attention_type: str,
                       vocab_size: int | None = None) -> TextbookRNNSeq2Seq:
    h = dims.rnn_hidden
    return TextbookRNNSeq2Seq(vocab_size or dims.vocab_size, h, h, h, h, cell_type, attention_type, dropout=0.1)


TRAINING_BUILDERS: dict[str, Callable[[TransformerDims], torch.nn.Module]] = {
    "hf_s2s (post-LN)": build_hf_s2s_transformer,
    "hf_s2s (pre-LN)": lambda dims: build_hf_s2s_transformer(dims, "pre"),
    "MarianMT": build_marian,
}




def make_trainer(model: torch.nn.Module, lr: float = 3e-4) -> Callable[[dict], None]:
    """One training step per call: forward, backward, AdamW. The same optimizer for every model: torch's fused
    CPU AdamW (the fastest implementation here)."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)

    def step(batch: dict) -> None:
        if isinstance(model, TextbookRNNSeq2Seq):
            loss = model(**model_inputs(batch))
        else:
            loss = model(**model_inputs(batch)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


# ----------------------------------------------------------------------------------------------------- memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _memory_probe(spec: dict) -> dict:
    """Runs in a fresh process: build the model named in ``spec``, then train it on the benchmark's batches and
    report the peak resident memory above what the built model and its batches already held."""
    set_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    dims = TransformerDims(**spec["dims"])
    model = TRAINING_BUILDERS[spec["model"]](dims)
    batches = make_batches([tuple(p) for p in spec["length_pairs"]], spec["steps"], dims.batch_size,
                           dims.vocab_size, seed=spec["seed"])
    step = make_trainer(model)
    baseline = _rss_bytes()
    for batch in batches:
        step(batch)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {"peak_rss_growth_mb": (peak - baseline) / 2**20, "baseline_rss_mb": baseline / 2**20}


def peak_training_memory(spec: dict) -> dict:
    """Peak RSS growth of ``spec["steps"]`` training steps (forward + backward + AdamW) in a fresh process, so one
    model's allocations never count against another's. Measures activations + gradients + optimizer state +
    allocator slack, i.e. what the operating system had to provide; torch has no CPU allocator statistics."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_memory_probe, json.loads(json.dumps(spec))).result()
