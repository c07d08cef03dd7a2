"""Translation with a trained model: length-batched decoding with n-best lists and scores, and alignments."""

import gzip
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import LogitsProcessorList
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from .coverage import CoveragePenaltyLogitsProcessor, eager_attention
from .ensemble import Seq2SeqEnsemble
from .metrics import compute_translation_metrics
from .modeling_common import check_length_bound
from .tokenization import target_side

# Sentences per generate() call, and beam search's length penalty (score / length ** penalty). The main job
# decodes its test set with these too, so scripts/translate.py with its defaults reproduces results.json.
DEFAULT_BATCH_SIZE = 64
DEFAULT_LENGTH_PENALTY = 1.0


@dataclass
class Hypothesis:
    text: str
    # Log-probability of the hypothesis. Beam search: generate's beam score (sum of token log-probs divided
    # by length ** length_penalty). Greedy / sampling: the plain sum of token log-probs. None when the caller
    # asked for no scores.
    score: float | None


def check_decoding_options(*, num_beams: int | None, num_return_sequences: int = 1, batch_size: int = 1,
                           max_new_tokens: int | None = None, do_sample: bool = False,
                           coverage_penalty: float = 0.0) -> None:
    """Refuse decoding options that cannot work, before any model is loaded: each error names the option (its
    command-line flag in brackets), the value and what is allowed. ``max_new_tokens`` None means the model's
    generation config decides, and so does ``num_beams`` None (checked again by ``translate`` once it is known)."""
    counts = [("num_beams", "--beams", num_beams), ("num_return_sequences", "--nbest", num_return_sequences),
              ("batch_size", "--batch-size", batch_size), ("max_new_tokens", "--max-new-tokens", max_new_tokens)]
    for name, flag, value in counts:
        if value is None and name in ("num_beams", "max_new_tokens"):
            continue  # the generation config decides
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} ({flag}) must be a whole number >= 1, got {value!r}")
    if num_beams is not None and num_return_sequences > num_beams and not do_sample:
        raise ValueError(f"num_return_sequences ({num_return_sequences}, --nbest) must be <= num_beams "
                         f"({num_beams}, --beams): beam search returns at most one hypothesis per beam")
    if coverage_penalty < 0:
        raise ValueError(f"coverage_penalty (--coverage-penalty) must be >= 0 (0 = off), got {coverage_penalty}")
    if coverage_penalty and (num_beams == 1 or do_sample):
        raise ValueError(f"coverage_penalty (--coverage-penalty {coverage_penalty}) re-ranks beam search hypotheses: "
                         "it needs num_beams (--beams) > 1 and no sampling")


def length_bound_arguments(max_len_a: float | None, max_len_b: int | None, no_length_bound: bool,
                           flags: tuple[str, str, str] = ("--max-len-a", "--max-len-b", "--no-length-bound")) -> dict:
    """The source-relative length bound's ``generate`` arguments from a command line's three options (named by
    ``flags``): the values given (None: not given, the model's generation config keeps its own), or None for both
    when the bound is turned off. Bad values and an off switch combined with values are a ValueError naming the
    flag."""
    given = {name: value for name, value in (("max_len_a", max_len_a), ("max_len_b", max_len_b)) if value is not None}
    if no_length_bound and given:
        named = " and ".join(flag for flag, name in zip(flags, ("max_len_a", "max_len_b"), strict=False) if name in given)
        raise ValueError(f"{flags[2]} turns the length bound off; it cannot be combined with {named}")
    try:
        check_length_bound(max_len_a, max_len_b, complete=False)
    except ValueError as error:
        raise ValueError(f"{flags[0]}/{flags[1]}: {error}") from None
    return {"max_len_a": None, "max_len_b": None} if no_length_bound else given


def read_sentences(path: str | Path | None = None) -> list[str]:
    """The lines of ``path`` (stdin when None; a ``.gz`` file is decompressed), one sentence each, line ends (``\\n``
    or ``\\r\\n``) removed and blank lines kept (they translate to blank lines, so the output stays aligned with the
    input). An empty input, or a line that is not UTF-8, is a ValueError naming the input and the line."""
    name = str(path) if path else "standard input"
    data = Path(path).read_bytes() if path else sys.stdin.buffer.read()
    if path and str(path).endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise ValueError(f"{name} is not a readable gzip file ({error})") from error
    if not data:
        raise ValueError(f"{name} is empty: there is nothing to translate (one sentence per line expected)")
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the final line break ends the last line; it does not start a new one
    sentences = []
    for number, line in enumerate(lines, start=1):
        try:
            sentences.append(line.decode("utf-8").removesuffix("\r"))
        except UnicodeDecodeError as error:
            raise ValueError(f"{name}, line {number}, is not UTF-8 text (byte {line[error.start:error.start + 1]!r} "
                             f"at position {error.start + 1})") from error
    return sentences


def read_references(path: str | Path, count: int, input_name: str | Path | None = None) -> list[str]:
    """The reference translations in ``path``, one per line as :func:`read_sentences` reads them; a file whose line
    count is not the input's ``count`` is a ValueError (misaligned references would give a meaningless score)."""
    references = read_sentences(path)
    if len(references) != count:
        raise ValueError(f"--reference {path} has {len(references)} lines but the input "
                         f"({input_name or 'standard input'}) has {count}: they must match line by line")
    return references


def score_line(hypotheses: list[str], references: list[str], name: str | Path = "the references") -> str:
    """One line with the BLEU (cased and lowercased) and chrF of ``hypotheses`` against ``references``, computed by
    the metric the training job reports in ``results.json`` (:func:`hf_s2s.metrics.compute_translation_metrics`)."""
    scores = compute_translation_metrics(hypotheses, references)
    return (f"BLEU {scores['bleu']:.2f} | BLEU lc {scores['bleu_lowercase']:.2f} | chrF {scores['chrf']:.2f} | "
            f"{len(hypotheses)} sentences against {name} | length ratio "
            f"{scores['bleu_sys_len'] / max(scores['bleu_ref_len'], 1):.3f} ({scores['bleu_sys_len']:,} / "
            f"{scores['bleu_ref_len']:,} tokens) | {scores['bleu_signature']}")


def source_length_limit(tokenizer, max_source_length: int | None = None) -> int | None:
    """Where sources are cut: ``max_source_length`` when given, else the tokenizer's ``model_max_length`` (a folder
    written by the training job sets it to the run's ``--max_source_length``), else None (no limit)."""
    if max_source_length is None and tokenizer.model_max_length < VERY_LARGE_INTEGER:
        return tokenizer.model_max_length
    return max_source_length


def _batches_by_length(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), so little compute goes to padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _greedy_scores(model, output, eos_token_id: int) -> torch.Tensor:
    """Sum of log-probs of the generated tokens up to and including the first </s>. (batch,)"""
    # normalized here: compute_transition_scores(normalize_logits=True) reshapes by config.vocab_size, the source
    # vocabulary's, which breaks on a separate target vocabulary (decoder_vocab_size)
    step_log_probs = tuple(scores.log_softmax(dim=-1) for scores in output.scores)  # each (batch, target vocab)
    log_probs = model.compute_transition_scores(output.sequences, step_log_probs)  # (batch, new_tokens)
    generated = output.sequences[:, -log_probs.size(1) :]  # (batch, new_tokens)
    is_eos = (generated == eos_token_id).long()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0
    return log_probs.masked_fill(after_eos, 0.0).sum(dim=1)


@torch.no_grad()
def translate(model, tokenizer, sentences: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
              num_beams: int | None = None, num_return_sequences: int = 1, max_new_tokens: int | None = None,
              length_penalty: float = DEFAULT_LENGTH_PENALTY, max_source_length: int | None = None, scores: bool = True,
              coverage_penalty: float = 0.0, **generate_kwargs) -> list[list[Hypothesis]]:
    """Translate ``sentences``; returns, for each, its ``num_return_sequences`` best hypotheses, best first.

    Sentences are decoded in batches of similar length. Without ``num_beams`` or ``max_new_tokens``, the model's
    generation config decides (``num_beams``, ``max_length``), and without ``max_source_length`` the tokenizer's
    ``model_max_length`` (the main job saves its ``--max_source_length`` there); other ``generate`` arguments
    pass through, among them the source-relative length bound ``max_len_a``/``max_len_b`` (the generation config's
    by default; None for both turns it off). A blank sentence (empty or whitespace) is not decoded: its hypotheses are empty with score 0,
    never an invented translation.

    ``scores=False`` leaves each hypothesis' score None and saves the memory the scores take: ``generate`` then
    keeps no per-step scores, which under beam search are a (batch x beams, vocabulary) tensor per step (about
    1.6 GB for 128 sentences, 5 beams, 80 steps and 8,000 entries).

    ``coverage_penalty`` > 0 adds GNMT's coverage penalty with that beta to beam search (:mod:`hf_s2s.coverage`);
    ``model`` may be a :class:`hf_s2s.ensemble.Seq2SeqEnsemble`."""
    if num_beams is None:
        num_beams = model.generation_config.num_beams or 1  # None in a config that never set it: generate's 1
    max_source_length = source_length_limit(tokenizer, max_source_length)
    check_decoding_options(num_beams=num_beams, num_return_sequences=num_return_sequences, batch_size=batch_size,
                           max_new_tokens=max_new_tokens, do_sample=bool(generate_kwargs.get("do_sample")),
                           coverage_penalty=coverage_penalty)
    if max_new_tokens is not None and generate_kwargs.get("max_length") is not None:
        raise ValueError(f"give max_new_tokens ({max_new_tokens}) or max_length ({generate_kwargs['max_length']}), "
                         "not both")
    if max_new_tokens is not None:  # the models' generation config then drops its own max_length, without a warning
        generate_kwargs["max_new_tokens"] = max_new_tokens
    model.eval()
    device = next(model.parameters()).device
    blank_score = 0.0 if scores else None
    results = [[Hypothesis("", blank_score) for _ in range(num_return_sequences)] for _ in sentences]
    to_decode = [i for i, sentence in enumerate(sentences) if sentence.strip()]
    encoded = []  # a fast tokenizer raises on an empty batch
    if to_decode:
        encoded = tokenizer([sentences[i] for i in to_decode], truncation=max_source_length is not None,
                            max_length=max_source_length)["input_ids"]
    eos_token_id = model.generation_config.eos_token_id
    decoder, tracking = model, nullcontext()
    if coverage_penalty:  # the coverage is kept in the decoding wrapper's cache (see hf_s2s.coverage)
        decoder = model if isinstance(model, Seq2SeqEnsemble) else Seq2SeqEnsemble([model])
        max_length = (1 + max_new_tokens if max_new_tokens is not None
                      else generate_kwargs.get("max_length") or model.generation_config.max_length)
        processor = CoveragePenaltyLogitsProcessor(decoder, coverage_penalty, length_penalty, eos_token_id, max_length)
        generate_kwargs["logits_processor"] = LogitsProcessorList([*generate_kwargs.get("logits_processor", []),
                                                                   processor])
        tracking = decoder.tracking_coverage()
    with tracking:
        _translate_batches(decoder, tokenizer, encoded, to_decode, results, device=device, batch_size=batch_size,
                           num_beams=num_beams, num_return_sequences=num_return_sequences,
                           length_penalty=length_penalty, scores=scores, eos_token_id=eos_token_id,
                           generate_kwargs=generate_kwargs)
    return results


def _translate_batches(model, tokenizer, encoded: list[list[int]], to_decode: list[int], results, *, device,
                       batch_size: int, num_beams: int, num_return_sequences: int, length_penalty: float,
                       scores: bool, eos_token_id: int, generate_kwargs: dict) -> None:
    """The body of :func:`translate`: decode the tokenized sentences ``encoded`` (those at ``to_decode`` in the
    input) in batches of similar length, writing their hypotheses into ``results``."""
    for positions in _batches_by_length([len(ids) for ids in encoded], batch_size):
        batch_indices = [to_decode[i] for i in positions]
        features = [{"input_ids": encoded[i]} for i in positions]
        batch = tokenizer.pad(features, return_tensors="pt").to(device)
        output = model.generate(
            **batch, num_beams=num_beams, num_return_sequences=num_return_sequences,
            length_penalty=length_penalty,
            output_scores=scores, return_dict_in_generate=True, **generate_kwargs,
        )
        if not scores:
            values = [None] * len(output.sequences)
        elif num_beams > 1 and not generate_kwargs.get("do_sample"):
            values = output.sequences_scores.tolist()
        else:
            values = _greedy_scores(model, output, eos_token_id).tolist()
        texts = tokenizer.batch_decode(output.sequences, skip_special_tokens=True)
        for row, index in enumerate(batch_indices):
            span = range(row * num_return_sequences, (row + 1) * num_return_sequences)
            results[index] = [Hypothesis(texts[j], values[j]) for j in span]


@torch.no_grad()
def alignment(model, tokenizer, sentence: str, *, num_beams: int | None = 1, max_new_tokens: int | None = None,
              **generate_kwargs):
    """Translate one sentence and return ``(weights, source_tokens, target_tokens)``, where ``weights`` is the
    (target_len, source_len) cross-attention that produced each target token: the last decoder layer's,
    averaged over heads. Other ``generate`` arguments (the length bound's) pass through. The weights come from a teacher-forced pass over the generated translation, which
    gives the same attention as the decoding steps and works for every model family. Only the eager kernel returns
    weights: a model using another is switched to eager for the pass and switched back afterwards."""
    model.eval()
    device = next(model.parameters()).device
    batch = tokenizer([sentence], return_tensors="pt").to(device)
    beams = {} if num_beams is None else {"num_beams": num_beams}  # None: the generation config's
    sequences = model.generate(**batch, **beams, max_new_tokens=max_new_tokens, **generate_kwargs)
    with eager_attention([model]):
        outputs = model(**batch, decoder_input_ids=sequences[:, :-1], output_attentions=True)
    if not outputs.cross_attentions:
        raise ValueError(f"{type(model).__name__} returned no cross-attention weights (attention_type 'none'?)")
    weights = outputs.cross_attentions[-1][0].mean(dim=0)  # (tgt_len, src_len)
    source_tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    target_tokens = target_side(tokenizer).convert_ids_to_tokens(sequences[0, 1:].tolist())
    return weights, source_tokens, target_tokens
