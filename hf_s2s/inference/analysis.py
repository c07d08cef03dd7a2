"""What the encoder makes of a source: its self-attention, layer by layer and head by head (for heatmaps), and one
vector per sentence, the mean of its memory over the real tokens, compared by cosine similarity.

Shapes: N sentences, S the longest source in tokens (the tokenizer's </s> included), E the encoder output size.
"""

import torch
import torch.nn.functional as F

from .attention import eager_attention
from .decoding import batches_by_length, check_count, is_blank
from .translate import DEFAULT_BATCH_SIZE, _source_limit, encode_sources


def _encode(model, tokenizer, sentences: list[str], max_source_length: int | None) -> list[list[int]]:
    """The sources tokenized as ``translate`` does: cut to the tokenizer's ``model_max_length`` (or
    ``max_source_length``, or a learned position table), the cut ones named in a warning."""
    limit, reason = _source_limit(tokenizer, max_source_length, [model.config])
    return encode_sources(tokenizer, sentences, list(range(len(sentences))), limit, reason)


def _pad(model, tokenizer, encoded: list[list[int]]) -> dict[str, torch.Tensor]:
    """Token ids right-padded into input_ids and attention_mask (N, S), on the model's device."""
    batch = tokenizer.pad({"input_ids": encoded}, return_tensors="pt")
    return batch.to(next(model.parameters()).device)


def check_has_encoder_attention(config, name: str = "the model") -> None:
    """Refuse, from its config, a model (``name``) whose encoder has no self-attention (the RNN family: a GRU/LSTM
    reads the source in order)."""
    if getattr(config, "encoder_attention_heads", None) is None:
        raise ValueError(
            f"{name} ({config.model_type}) has no encoder self-attention: its encoder is a "
            f"{str(getattr(config, 'cell_type', 'recurrent')).upper()} network; encoder attention needs a Transformer "
            "(model_type 'transformer_seq2seq'). Its decoder's attention over the source is the alignment "
            "(hf_s2s.inference.translate.alignment, translate --plot-alignment)"
        )


@torch.no_grad()
def encoder_attention(model, tokenizer, sentences: list[str], *, max_source_length: int | None = None
                      ) -> tuple[torch.Tensor, list[list[str]]]:
    """The encoder's self-attention weights for ``sentences`` (one batch) and each sentence's source tokens.

    Returns weights (N, layers, heads, S, S): row i of a (S, S) map is what source token i attended to; each real
    row sums to 1, and padding columns (keys) and padding rows (a pad position is no token) are exactly 0; the
    tokens of sentence n are its first ``len(tokens[n])`` positions. The eager kernel is switched on for the pass
    (the others return no weights). A Transformer only: see :func:`check_has_encoder_attention`."""
    check_has_encoder_attention(model.config, type(model).__name__)
    model.eval()
    batch = _pad(model, tokenizer, _encode(model, tokenizer, sentences, max_source_length))
    with eager_attention([model]):
        outputs = model.get_encoder()(**batch, output_attentions=True)
    weights = torch.stack(outputs.attentions, dim=1)  # (N, layers, heads, S, S)
    real = batch["attention_mask"].bool()  # (N, S)
    weights = weights * real[:, None, None, :, None] * real[:, None, None, None, :]
    tokens = [tokenizer.convert_ids_to_tokens(ids[mask].tolist()) for ids, mask in zip(batch["input_ids"], real,
                                                                                        strict=True)]
    return weights, tokens


@torch.no_grad()
def sentence_embeddings(model, tokenizer, sentences: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
                        max_source_length: int | None = None) -> torch.Tensor:
    """One vector per sentence: the mean of the encoder's memory over its real tokens (its </s> included, padding
    never), for both families. Sentences are encoded in batches of similar length; a sentence's vector does not
    depend on its batch. Returns (N, E) float32 on the model's device."""
    check_count("batch_size", batch_size)
    if not sentences:
        raise ValueError("sentence_embeddings got no sentences")
    blank = [i for i, sentence in enumerate(sentences) if is_blank(sentence)]
    if blank:
        raise ValueError(f"sentence_embeddings got {len(blank)} blank sentence(s), at position(s) "
                         f"{', '.join(map(str, blank[:10]))}{' ...' if len(blank) > 10 else ''} (from 0): a sentence "
                         "without words has no meaning to embed (its vector would be the end-of-sentence token's)")
    model.eval()
    encoder = model.get_encoder()
    vectors = [None] * len(sentences)
    encoded = _encode(model, tokenizer, sentences, max_source_length)
    for indices in batches_by_length([len(ids) for ids in encoded], batch_size):
        batch = _pad(model, tokenizer, [encoded[i] for i in indices])
        memory = encoder(**batch).last_hidden_state.float()  # (B, S, E)
        real = batch["attention_mask"].to(memory.dtype)[:, :, None]  # (B, S, 1)
        means = (memory * real).sum(dim=1) / real.sum(dim=1).clamp(min=1)  # (B, E)
        for row, index in enumerate(indices):
            vectors[index] = means[row]
    return torch.stack(vectors)  # (N, E)


def similarity(model, tokenizer, first: list[str], second: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
               max_source_length: int | None = None) -> torch.Tensor:
    """Cosine similarity of each pair (first[i], second[i]) of sentences, from :func:`sentence_embeddings`:
    (N,) in [-1, 1]. Both lists are encoded together, so equal lengths share batches."""
    if len(first) != len(second):
        raise ValueError(f"similarity compares pairs: got {len(first)} first and {len(second)} second sentences")
    vectors = sentence_embeddings(model, tokenizer, [*first, *second], batch_size=batch_size,
                                  max_source_length=max_source_length)
    return F.cosine_similarity(vectors[: len(first)], vectors[len(first) :], dim=-1)


__all__ = ["check_has_encoder_attention", "encoder_attention", "sentence_embeddings", "similarity"]
