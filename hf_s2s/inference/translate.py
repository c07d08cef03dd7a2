"""Translation with a trained model: length-batched decoding with n-best lists and scores, and alignments.

Every decoding option is checked before any model is loaded (:func:`check_decoding_options`,
:func:`length_bound_arguments`), and what a model's config rules out before its weights are loaded
(:func:`check_models_support`)."""

import logging
import math
from contextlib import nullcontext
from dataclasses import dataclass
from numbers import Real
from pathlib import Path

import torch
from transformers import LogitsProcessorList
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from ..data.corpus import _lines, is_blank
from ..data.tokenization import target_side
from ..metrics import compute_translation_metrics
from ..models.modeling_common import DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B, check_length_bound
from .attention import eager_attention
from .ensemble import Seq2SeqEnsemble
from .penalties import CoveragePenaltyLogitsProcessor

logger = logging.getLogger(__name__)

# Sentences per generate() call, and beam search's length penalty (score / length ** penalty). The main job
# decodes its test set with these too, so scripts/translate.py with its defaults reproduces results.json.
DEFAULT_BATCH_SIZE = 64
DEFAULT_LENGTH_PENALTY = 1.0

# Beam search divides a score by length ** penalty: GNMT's alpha and fairseq's --lenpen sit in [0, 2] (negative
# favours short outputs); within +-5, length ** penalty stays finite in float32 for any output of < 40,000 tokens.
LENGTH_PENALTY_LIMIT = 5.0
# GNMT's beta: Wu et al. 2016 searched [0, 1], and on the reference models 0.05 already costs 6 to 9 BLEU (README);
# 10 leaves room to experiment while refusing typos and overflows (1e18, inf).
COVERAGE_PENALTY_LIMIT = 10.0
# Sentences named one by one in the warning about sources cut to the length limit; the count says how many more.
_SHOWN_CUTS = 10


@dataclass
class Hypothesis:
    text: str
    # Log-probability of the hypothesis. Beam search: generate's beam score (sum of token log-probs divided
    # by length ** length_penalty). Greedy / sampling: the plain sum of token log-probs. None when the caller
    # asked for no scores.
    score: float | None


def _check_number(name: str, flag: str, value, low: float, high: float, meaning: str) -> None:
    """A finite real number in [low, high], else a ValueError naming the option, its flag, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} ({flag}) must be a finite number in [{low:g}, {high:g}] ({meaning}), got {value!r}")


def check_decoding_options(*, num_beams: int | None, num_return_sequences: int = 1, batch_size: int = 1,
                           max_new_tokens: int | None = None, do_sample: bool = False,
                           coverage_penalty: float = 0.0, length_penalty: float | None = None) -> None:
    """Refuse decoding options that cannot work, before any model is loaded: each error names the option (its
    command-line flag in brackets), the value and what is allowed. ``max_new_tokens`` None means the model's
    generation config decides, and so do ``num_beams`` None and ``length_penalty`` None (each checked again by
    ``translate`` once it is known)."""
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
    if length_penalty is not None:
        _check_number("length_penalty", "--length-penalty", length_penalty, -LENGTH_PENALTY_LIMIT,
                      LENGTH_PENALTY_LIMIT, "beam scores are divided by length ** penalty; 1.0: the mean token "
                      "log-probability")
    _check_number("coverage_penalty", "--coverage-penalty", coverage_penalty, 0.0, COVERAGE_PENALTY_LIMIT,
                  "GNMT's beta; 0 = off")
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
    check_length_bound_values(max_len_a, max_len_b, flags[:2], complete=len(given) == 2)
    return {"max_len_a": None, "max_len_b": None} if no_length_bound else given


def check_length_bound_values(max_len_a: float | None, max_len_b: int | None,
                              flags: tuple[str, str] = ("--max-len-a", "--max-len-b"), complete: bool = True) -> None:
    """:func:`hf_s2s.models.modeling_common.check_length_bound` (``complete=False``: a value None is not given yet, so a
    bound of 0 tokens is found only once both are known), its errors naming ``flags``."""
    try:
        check_length_bound(max_len_a, max_len_b, complete=complete, names=flags)
    except ValueError as error:
        if str(error).startswith(flags):  # an upper limit, named by its own flag
            raise
        raise ValueError(f"{flags[0]}/{flags[1]}: {error}") from None


# The input a translation reads from when no file is named; read through its path, as the corpus loader reads files.
STDIN_PATH = Path("/dev/stdin")


def read_sentences(path: str | Path | None = None) -> list[str]:
    """The lines of ``path`` (stdin when None; a ``.gz`` file is decompressed), one sentence each, read as the corpus
    loader reads its text files (``hf_s2s.data.corpus``): UTF-8, a line ends only at ``\\n`` (or ``\\r\\n``), a byte-order
    mark at the start of the file is dropped, and a lone ``\\r`` stays inside its line with a warning (so a file with
    old Mac line ends is one line, said so on stderr). Blank lines are kept (they translate to blank lines, so the
    output stays aligned with the input). An empty input, a line that is not UTF-8 or a damaged gzip file is a
    ValueError naming the input (and the line)."""
    name = str(path) if path else "standard input"
    try:
        sentences = [text for _, text in _lines(Path(path) if path else STDIN_PATH)]
    except ValueError as error:  # the corpus loader names the path it opened
        raise ValueError(str(error).replace(str(STDIN_PATH), name, 1)) from None
    if not sentences:
        raise ValueError(f"{name} is empty: there is nothing to translate (one sentence per line expected)")
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


def _source_limit(tokenizer, max_source_length: int | None, configs) -> tuple[int | None, str]:
    """Where ``translate`` cuts sources, and why: :func:`source_length_limit`, or the smallest learned position table
    of the models when that is shorter (a longer source cannot be embedded)."""
    limit = source_length_limit(tokenizer, max_source_length)
    reason = "max_source_length" if max_source_length is not None else "the tokenizer's model_max_length"
    tables = [table for table in map(position_limit, configs) if table is not None]
    if tables and (limit is None or min(tables) < limit):
        limit, reason = min(tables), "the model's learned position table"
    return limit, reason


def position_limit(config) -> int | None:
    """The most positions a model's encoder or decoder can embed: a learned position table's rows
    (``position_embedding_type`` "learned"), else None (sinusoidal positions and recurrent models have no limit)."""
    if getattr(config, "position_embedding_type", None) == "learned":
        return config.max_position_embeddings
    return None


def has_source_attention(config) -> bool:
    """Whether a model's decoder attends to the source, which the coverage penalty and alignments read: every
    Transformer, and an RNN unless its ``attention_type`` is "none" (Cho et al. 2014: the source in one vector)."""
    return getattr(config, "attention_type", None) != "none"


def check_models_support(configs, names=None, *, coverage_penalty: float = 0.0, alignment: bool = False,
                         max_new_tokens: int | None = None, max_length: int | None = None) -> None:
    """Refuse, from the models' configs (so before their weights are loaded), decoding they cannot do: a coverage
    penalty or an alignment on a model without attention over the source, and more new tokens than a learned
    position table holds (``max_new_tokens``, else ``max_length``, which counts the decoder start token). ``names``
    name the models in the errors (folders; default: their model type)."""
    for config, name in zip(configs, names or [config.model_type for config in configs], strict=True):
        if (coverage_penalty or alignment) and not has_source_attention(config):
            what = "the coverage penalty (--coverage-penalty)" if coverage_penalty else "an alignment (--plot-alignment)"
            raise ValueError(f"{what} reads the decoder's attention over the source, but {name} has none "
                             f"({config.model_type} with attention_type {config.attention_type!r})")
        limit = position_limit(config)
        new_tokens = max_new_tokens if max_new_tokens is not None else max_length and max_length - 1
        if limit is not None and new_tokens is not None and new_tokens > limit:
            given = (f"max_new_tokens (--max-new-tokens) {max_new_tokens}" if max_new_tokens is not None else
                     f"the generation config's max_length {max_length} ({new_tokens} new tokens)")
            raise ValueError(f"{given} is beyond {name}'s learned position table of {limit} positions (its decoder "
                             f"embeds the start token and every generated token but the last): give at most {limit}")


def encode_sources(tokenizer, sentences: list[str], indices: list[int], max_source_length: int | None,
                   reason: str = "max_source_length") -> list[list[int]]:
    """The token ids of ``sentences[i]`` for each i in ``indices``, each cut to ``max_source_length`` tokens (its
    first ones and its ``</s>``, as the tokenizer truncates) when longer. The sentences that were cut are named in a
    warning: their number from 1 (the input's line number) and length, and ``reason``, where the limit comes from."""
    if not indices:
        return []  # a fast tokenizer raises on an empty batch
    encoded = tokenizer([sentences[i] for i in indices])["input_ids"]
    if max_source_length is None:
        return encoded
    cut = [position for position, ids in enumerate(encoded) if len(ids) > max_source_length]
    if cut:
        lengths = [len(encoded[position]) for position in cut]
        shortened = tokenizer([sentences[indices[position]] for position in cut], truncation=True,
                              max_length=max_source_length)["input_ids"]
        for position, ids in zip(cut, shortened, strict=True):
            encoded[position] = ids
        named = ", ".join(f"{indices[position] + 1} ({length} tokens)"
                          for position, length in list(zip(cut, lengths, strict=True))[:_SHOWN_CUTS])
        more = f" and {len(cut) - _SHOWN_CUTS} more" if len(cut) > _SHOWN_CUTS else ""
        logger.warning("%d of %d sentences are longer than the %d source tokens the model reads (%s) and are "
                       "translated cut to them: %s %s%s", len(cut), len(sentences), max_source_length, reason,
                       "line" if len(cut) == 1 else "lines", named, more)
    return encoded


def _batches_by_length(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), so little compute goes to padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _greedy_scores(output, eos_token_id: int) -> torch.Tensor:
    """Sum of log-probs of the generated tokens up to and including the first </s>. (batch,)"""
    # gathered here, not by compute_transition_scores: it finds row r's scores at r x config.vocab_size, the source
    # vocabulary's size, which under a separate target vocabulary of another size (decoder_vocab_size) are another
    # row's, or past the end
    step_log_probs = torch.stack(output.scores, dim=1).log_softmax(dim=-1)  # (batch, new_tokens, target vocab)
    generated = output.sequences[:, -step_log_probs.size(1) :]  # (batch, new_tokens)
    log_probs = step_log_probs.gather(2, generated.unsqueeze(-1)).squeeze(-1)  # (batch, new_tokens)
    is_eos = (generated == eos_token_id).long()
    after_eos = (is_eos.cumsum(dim=1) - is_eos) > 0
    return log_probs.masked_fill(after_eos, 0.0).sum(dim=1)


def _members(model) -> list:
    """The models an ensemble decodes with, or the model itself."""
    return list(model.members) if isinstance(model, Seq2SeqEnsemble) else [model]


def configured_length_penalty(generation_config, length_penalty: float | None) -> float:
    """``length_penalty``, or where it is None the generation config's, as generate() completes it (transformers'
    1.0 where the config has none). A converted folder carries its toolkit's (Joey NMT's default: 0, raw sums)."""
    if length_penalty is not None:
        return length_penalty
    configured = getattr(generation_config, "length_penalty", None)
    return DEFAULT_LENGTH_PENALTY if configured is None else configured


def check_translation(model, *, num_beams: int | None = None, num_return_sequences: int = 1,
                      batch_size: int = DEFAULT_BATCH_SIZE, max_new_tokens: int | None = None,
                      length_penalty: float | None = None, coverage_penalty: float = 0.0,
                      **generate_kwargs) -> int:
    """Everything :func:`translate` refuses, with the loaded ``model`` (or ensemble) and its generation config to
    complete the options: the options themselves, the length bound as generate() would complete it, and what the
    model cannot do (:func:`check_models_support`). A command line runs it right after loading, so nothing fails
    once decoding has begun. Returns the beam count decoding uses (``num_beams``, else the generation config's)."""
    if num_beams is None:
        num_beams = model.generation_config.num_beams or 1  # None in a config that never set it: generate's 1
    check_decoding_options(num_beams=num_beams, num_return_sequences=num_return_sequences, batch_size=batch_size,
                           max_new_tokens=max_new_tokens, do_sample=bool(generate_kwargs.get("do_sample")),
                           coverage_penalty=coverage_penalty,
                           length_penalty=configured_length_penalty(model.generation_config, length_penalty))
    if max_new_tokens is not None and generate_kwargs.get("max_length") is not None:
        raise ValueError(f"give max_new_tokens ({max_new_tokens}) or max_length ({generate_kwargs['max_length']}), "
                         "not both")
    bound = [generate_kwargs.get(name, getattr(model.generation_config, name, default))  # as generate() completes it
             for name, default in (("max_len_a", DEFAULT_MAX_LEN_A), ("max_len_b", DEFAULT_MAX_LEN_B))]
    check_length_bound_values(*bound, flags=("max_len_a", "max_len_b"))
    check_models_support([member.config for member in _members(model)], coverage_penalty=coverage_penalty,
                         max_new_tokens=max_new_tokens,
                         max_length=generate_kwargs.get("max_length") or model.generation_config.max_length)
    return num_beams


@torch.no_grad()
def translate(model, tokenizer, sentences: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
              num_beams: int | None = None, num_return_sequences: int = 1, max_new_tokens: int | None = None,
              length_penalty: float | None = None, max_source_length: int | None = None, scores: bool = True,
              coverage_penalty: float = 0.0, **generate_kwargs) -> list[list[Hypothesis]]:
    """Translate ``sentences``; returns, for each, its ``num_return_sequences`` best hypotheses, best first.

    Sentences are decoded in batches of similar length. Without ``num_beams``, ``max_new_tokens`` or
    ``length_penalty``, the model's generation config decides (``num_beams``, ``max_length``, ``length_penalty``),
    and without ``max_source_length`` the tokenizer's ``model_max_length`` (the main job saves its ``--max_source_length`` there); other ``generate`` arguments
    pass through, among them the source-relative length bound ``max_len_a``/``max_len_b`` (the generation config's
    by default; None for both turns it off). A blank sentence (:func:`is_blank`: nothing but whitespace, control and
    format characters) is not decoded: its hypotheses are empty with score 0, never an invented translation, and
    the output keeps one entry per input. Sources longer than the limit (``max_source_length``, the tokenizer's, or
    a learned position table's) are cut to it, and named in a warning.

    ``scores=False`` leaves each hypothesis' score None and saves the memory the scores take: ``generate`` then
    keeps no per-step scores, which under beam search are a (batch x beams, vocabulary) tensor per step (about
    1.6 GB for 128 sentences, 5 beams, 80 steps and 8,000 entries).

    ``coverage_penalty`` > 0 adds GNMT's coverage penalty with that beta to beam search (:mod:`hf_s2s.inference.penalties`);
    ``model`` may be a :class:`hf_s2s.inference.ensemble.Seq2SeqEnsemble`."""
    length_penalty = configured_length_penalty(model.generation_config, length_penalty)
    num_beams = check_translation(model, num_beams=num_beams, num_return_sequences=num_return_sequences,
                                  batch_size=batch_size, max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                                  coverage_penalty=coverage_penalty, **generate_kwargs)
    configs = [member.config for member in _members(model)]
    if max_new_tokens is not None:  # the models' generation config then drops its own max_length, without a warning
        generate_kwargs["max_new_tokens"] = max_new_tokens
    max_source_length, reason = _source_limit(tokenizer, max_source_length, configs)
    model.eval()
    device = next(model.parameters()).device
    blank_score = 0.0 if scores else None
    results = [[Hypothesis("", blank_score) for _ in range(num_return_sequences)] for _ in sentences]
    to_decode = [i for i, sentence in enumerate(sentences) if not is_blank(sentence)]
    encoded = encode_sources(tokenizer, sentences, to_decode, max_source_length, reason)
    eos_token_id = model.generation_config.eos_token_id
    decoder, tracking = model, nullcontext()
    if coverage_penalty:  # the coverage is kept in the decoding wrapper's cache (see hf_s2s.inference.penalties)
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
            values = _greedy_scores(output, eos_token_id).tolist()
        texts = tokenizer.batch_decode(output.sequences, skip_special_tokens=True)
        for row, index in enumerate(batch_indices):
            span = range(row * num_return_sequences, (row + 1) * num_return_sequences)
            results[index] = [Hypothesis(texts[j], values[j]) for j in span]


@dataclass
class Attentions:
    """The attention weights that produced one sentence's translation, every layer and head, read from a
    teacher-forced pass over the translation (:func:`attentions`)."""

    source_tokens: list[str]  # S tokens, </s> included
    target_tokens: list[str]  # T tokens: the translation after the decoder start token, </s> included if generated
    cross_attentions: torch.Tensor  # (decoder layers, heads, T, S); the RNN family: one "layer" of its attention
    encoder_attentions: torch.Tensor | None  # (encoder layers, heads, S, S); None where the encoder has none (RNN)

    def alignment(self) -> torch.Tensor:
        """(T, S): the last decoder layer's cross-attention averaged over heads, what :func:`alignment` returns."""
        return self.cross_attentions[-1].mean(dim=0)


@torch.no_grad()
def attentions(model, tokenizer, sentence: str, *, num_beams: int | None = 1, max_new_tokens: int | None = None,
               **generate_kwargs) -> Attentions:
    """Translate one sentence and return every attention weight that produced its translation: the decoder's
    cross-attention of each layer and head and, for the Transformer, the encoder's self-attention. Other ``generate``
    arguments (the length bound's) pass through. The weights come from a teacher-forced pass over the generated
    translation, which gives the same attention as the decoding steps (``generate(output_attentions=True)``) and works
    for every model family. Only the eager kernel returns weights: a model using another is switched to eager for
    the pass and switched back afterwards."""
    check_models_support([model.config], alignment=True, max_new_tokens=max_new_tokens)
    model.eval()
    device = next(model.parameters()).device
    batch = tokenizer([sentence], return_tensors="pt").to(device)
    beams = {} if num_beams is None else {"num_beams": num_beams}  # None: the generation config's
    sequences = model.generate(**batch, **beams, max_new_tokens=max_new_tokens, **generate_kwargs)
    with eager_attention([model]):
        outputs = model(**batch, decoder_input_ids=sequences[:, :-1], output_attentions=True)
    if not outputs.cross_attentions:
        raise ValueError(f"{type(model).__name__} returned no cross-attention weights (attention_type 'none'?)")
    encoder = outputs.encoder_attentions
    return Attentions(
        source_tokens=tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist()),
        target_tokens=target_side(tokenizer).convert_ids_to_tokens(sequences[0, 1:].tolist()),
        cross_attentions=torch.stack(outputs.cross_attentions)[:, 0],  # (layers, heads, T, S)
        encoder_attentions=torch.stack(encoder)[:, 0] if encoder else None,  # (layers, heads, S, S)
    )


def alignment(model, tokenizer, sentence: str, *, num_beams: int | None = 1, max_new_tokens: int | None = None,
              **generate_kwargs):
    """Translate one sentence and return ``(weights, source_tokens, target_tokens)``, where ``weights`` is the
    (target_len, source_len) cross-attention that produced each target token: the last decoder layer's, averaged
    over heads (:func:`attentions` has every layer and head)."""
    found = attentions(model, tokenizer, sentence, num_beams=num_beams, max_new_tokens=max_new_tokens,
                       **generate_kwargs)
    return found.alignment(), found.source_tokens, found.target_tokens
