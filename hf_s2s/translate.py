"""Translation with a trained model: length-batched decoding with n-best lists and scores, and alignments."""

from dataclasses import dataclass

import torch
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

# Sentences per generate() call, and beam search's length penalty (score / length ** penalty). The main job
# decodes its test set with these too, so scripts/translate.py with its defaults reproduces results.json.
DEFAULT_BATCH_SIZE = 64
DEFAULT_LENGTH_PENALTY = 1.0


@dataclass
class Hypothesis:
    text: str
    # Log-probability of the hypothesis. Beam search: generate's beam score (sum of token log-probs divided
    # by length ** length_penalty). Greedy / sampling: the plain sum of token log-probs.
    score: float


def _batches_by_length(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), so little compute goes to padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _greedy_scores(model, output, eos_token_id: int) -> torch.Tensor:
    """Sum of log-probs of the generated tokens up to and including the first </s>. (batch,)"""
    log_probs = model.compute_transition_scores(output.sequences, output.scores, normalize_logits=True)
    generated = output.sequences[:, -log_probs.size(1) :]  # (batch, new_tokens)
    is_eos = (generated == eos_token_id).long()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0
    return log_probs.masked_fill(after_eos, 0.0).sum(dim=1)


@torch.no_grad()
def translate(model, tokenizer, sentences: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
              num_beams: int | None = None,
              num_return_sequences: int = 1, max_new_tokens: int | None = None, length_penalty: float = DEFAULT_LENGTH_PENALTY,
              max_source_length: int | None = None, **generate_kwargs) -> list[list[Hypothesis]]:
    """Translate ``sentences``; returns, for each, its ``num_return_sequences`` best hypotheses, best first.

    Sentences are decoded in batches of similar length. Without ``num_beams`` or ``max_new_tokens``, the model's
    generation config decides (``num_beams``, ``max_length``), and without ``max_source_length`` the tokenizer's
    ``model_max_length`` (the main job saves its ``--max_source_length`` there); other ``generate`` arguments
    pass through."""
    if num_beams is None:
        num_beams = model.generation_config.num_beams
    if max_source_length is None and tokenizer.model_max_length < VERY_LARGE_INTEGER:
        max_source_length = tokenizer.model_max_length
    if num_return_sequences > num_beams and not generate_kwargs.get("do_sample"):
        raise ValueError(f"num_return_sequences ({num_return_sequences}) must be <= num_beams ({num_beams})")
    model.eval()
    device = next(model.parameters()).device
    encoded = tokenizer(sentences, truncation=max_source_length is not None, max_length=max_source_length)
    lengths = [len(ids) for ids in encoded["input_ids"]]
    results: list[list[Hypothesis] | None] = [None] * len(sentences)
    eos_token_id = model.generation_config.eos_token_id
    for batch_indices in _batches_by_length(lengths, batch_size):
        features = [{"input_ids": encoded["input_ids"][i]} for i in batch_indices]
        batch = tokenizer.pad(features, return_tensors="pt").to(device)
        output = model.generate(
            **batch, num_beams=num_beams, num_return_sequences=num_return_sequences,
            max_new_tokens=max_new_tokens, length_penalty=length_penalty,
            output_scores=True, return_dict_in_generate=True, **generate_kwargs,
        )
        if num_beams > 1 and not generate_kwargs.get("do_sample"):
            scores = output.sequences_scores
        else:
            scores = _greedy_scores(model, output, eos_token_id)
        texts = tokenizer.batch_decode(output.sequences, skip_special_tokens=True)
        for row, index in enumerate(batch_indices):
            span = range(row * num_return_sequences, (row + 1) * num_return_sequences)
            results[index] = [Hypothesis(texts[j], float(scores[j])) for j in span]
    return results


@torch.no_grad()
def alignment(model, tokenizer, sentence: str, *, num_beams: int = 1, max_new_tokens: int | None = None):
    """Translate one sentence and return ``(weights, source_tokens, target_tokens)``, where ``weights`` is the
    (target_len, source_len) cross-attention that produced each target token: the last decoder layer's,
    averaged over heads. The weights come from a teacher-forced pass over the generated translation, which
    gives the same attention as the decoding steps and works for every model family."""
    model.eval()
    if getattr(model.config, "_attn_implementation", None) not in (None, "eager"):
        model.set_attn_implementation("eager")  # sdpa returns no attention weights
    device = next(model.parameters()).device
    batch = tokenizer([sentence], return_tensors="pt").to(device)
    sequences = model.generate(**batch, num_beams=num_beams, max_new_tokens=max_new_tokens)
    outputs = model(**batch, decoder_input_ids=sequences[:, :-1], output_attentions=True)
    if not outputs.cross_attentions:
        raise ValueError(f"{type(model).__name__} returned no cross-attention weights (attention_type 'none'?)")
    weights = outputs.cross_attentions[-1][0].mean(dim=0)  # (tgt_len, src_len)
    source_tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    target_tokens = tokenizer.convert_ids_to_tokens(sequences[0, 1:].tolist())
    return weights, source_tokens, target_tokens
