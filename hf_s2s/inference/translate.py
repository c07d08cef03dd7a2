"""Translation with a trained model: length-batched decoding with n-best lists and scores, and alignments.

:func:`translate` is the Python API of the torch engine (:mod:`hf_s2s.inference.engines`): it completes its options
from the model's generation config once (:func:`resolve_options`, :class:`hf_s2s.inference.decoding.DecodingOptions`,
as every engine does) and decodes with them (:func:`translate_with_options`, what the torch engine calls with options
it resolved itself). What a model's config rules out (a coverage penalty or an alignment without attention over the
source) is refused from the config alone, before any weights are loaded (:func:`check_models_support`)."""

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import LogitsProcessorList
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from ..data.corpus import _lines
from ..data.tokenization import target_side
from ..metrics import compute_translation_metrics
from ..models.modeling_common import DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B
from ..models.shortlist import VocabularyShortlist
from ..models.term_constraints import Glossary
from .attention import eager_attention
from .decoding import (
    OPTIONS,
    SETTINGS,
    DecodingOptions,
    check_length_bound_flags,
    check_positions,
    decode_lines,
    encode_lines,
    length_bound_call,
    source_limit,
)
from .ensemble import Seq2SeqEnsemble
from .penalties import CoveragePenaltyLogitsProcessor

logger = logging.getLogger(__name__)

# Sentences per generate() call. The main job decodes its test set with it (and DEFAULT_LENGTH_PENALTY), so
# scripts/translate.py with its defaults reproduces results.json.
DEFAULT_BATCH_SIZE = 64


@dataclass
class Hypothesis:
    text: str
    # Log-probability of the hypothesis. Beam search: generate's beam score (sum of token log-probs divided
    # by length ** length_penalty). Greedy / sampling: the plain sum of token log-probs. None when the caller
    # asked for no scores.
    score: float | None


def length_bound_arguments(max_len_a: float | None, max_len_b: int | None, no_length_bound: bool,
                           flags: tuple[str, str, str] = ("--max-len-a", "--max-len-b", "--no-length-bound")) -> dict:
    """:func:`hf_s2s.inference.decoding.length_bound_call` with the values checked alone, their errors naming
    ``flags``, for a command line that sets the bound without decoding (``hf-s2s train``'s flags, saved in the
    generation config): the values given (None: not given, the model's generation config keeps its own), or None for
    both when the bound is turned off."""
    call = length_bound_call(max_len_a, max_len_b, no_length_bound, flags)
    check_length_bound_flags(max_len_a, max_len_b, flags[:2], complete=len(call) == 2 and not no_length_bound)
    return call


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


def model_max_length(tokenizer) -> int | None:
    """The tokenizer's ``model_max_length``, None where it sets none (transformers' "no limit", a huge number)."""
    return tokenizer.model_max_length if tokenizer.model_max_length < VERY_LARGE_INTEGER else None


def _source_limit(tokenizer, max_source_length: int | None, configs) -> tuple[int | None, str]:
    """Where ``translate`` cuts sources, and why (:func:`hf_s2s.inference.decoding.source_limit`): the smallest learned
    position table of the models where it is shorter than ``max_source_length`` or the tokenizer's limit."""
    tables = [table for table in map(position_limit, configs) if table is not None]
    return source_limit(model_max_length(tokenizer), max_source_length, min(tables, default=None))


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


def check_models_support(configs, names=None, *, coverage_penalty: float = 0.0, alignment: bool = False) -> None:
    """Refuse, from the models' configs (so before their weights are loaded), decoding they cannot do: a coverage
    penalty or an alignment on a model without attention over the source. ``names`` name the models in the errors
    (folders; default: their model type)."""
    for config, name in zip(configs, names or [config.model_type for config in configs], strict=True):
        if (coverage_penalty or alignment) and not has_source_attention(config):
            what = "the coverage penalty (--coverage-penalty)" if coverage_penalty else "an alignment (--plot-alignment)"
            raise ValueError(f"{what} reads the decoder's attention over the source, but {name} has none "
                             f"({config.model_type} with attention_type {config.attention_type!r})")


def tokenizer_encoder(tokenizer):
    """:data:`hf_s2s.inference.decoding.Encode` with a transformers tokenizer."""
    def encode(texts: list[str], max_length: int | None) -> list[list[int]]:
        return tokenizer(texts, truncation=max_length is not None, max_length=max_length)["input_ids"]
    return encode


def encode_sources(tokenizer, sentences: list[str], indices: list[int], max_source_length: int | None,
                   reason: str = "max_source_length") -> list[list[int]]:
    """:func:`hf_s2s.inference.decoding.encode_lines` with a transformers tokenizer: the token ids of ``sentences[i]``
    for each i in ``indices``, cut to ``max_source_length`` tokens, the cut ones named in a warning."""
    return encode_lines(sentences, indices, tokenizer_encoder(tokenizer), max_source_length, reason)


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


def generation_settings(generation_config) -> dict:
    """A model's generation config as :meth:`hf_s2s.inference.decoding.DecodingOptions.resolve` reads it: with the
    length bound a config saved without it decodes with (the defaults, as generate() completes it)."""
    return {"max_len_a": DEFAULT_MAX_LEN_A, "max_len_b": DEFAULT_MAX_LEN_B, **generation_config.to_dict()}


def options_for(settings: dict, configs, names=None, *, engine: str = "generate()", implements=None,
                **call) -> DecodingOptions:
    """The decoding options of ``call`` (generate()'s names: :data:`hf_s2s.inference.decoding.OPTIONS`, ``SETTINGS``
    and ``OWN_OPTIONS``; None: not given) completed from a generation config (``settings``: as
    :func:`generation_settings` gives it) as generate() completes them and checked
    (:meth:`~hf_s2s.inference.decoding.DecodingOptions.resolve`), for the models of ``configs`` (one folder's, or an
    ensemble's members'; ``names`` name them in the errors): the one place every engine completes its options, from the
    folder's files, so before any weights are loaded. ``engine`` and ``implements``: the engine and
    the generation settings it decodes (None: all, generate() itself). A coverage penalty on a model without attention
    over the source is refused too (:func:`check_models_support`)."""
    named = names or ["the model"] * len(configs)
    tables = sorted((table, name) for table, name in zip(map(position_limit, configs), named, strict=True)
                    if table is not None)
    # generate() cuts its default length to the model's own positions; an ensemble's config has no table
    max_position_embeddings = getattr(configs[0], "max_position_embeddings", None) if len(configs) == 1 else None
    options = DecodingOptions.resolve(settings, engine=engine, implements=implements,
                                      max_position_embeddings=max_position_embeddings,
                                      position_limit=tables[0][0] if tables else None,
                                      model=tables[0][1] if tables else "the model", **call)
    check_models_support(configs, names, coverage_penalty=options.coverage_penalty)
    return options


def resolve_options(model, *, engine: str = "generate()", implements=None, **call) -> DecodingOptions:
    """:func:`options_for` a loaded ``model``: the model, an ensemble (its members' configs), or any object with the
    exported model's ``config`` and ``generation_config``."""
    return options_for(generation_settings(model.generation_config), [member.config for member in _members(model)],
                       engine=engine, implements=implements, **call)


def translate(model, tokenizer, sentences: list[str], *, batch_size: int = DEFAULT_BATCH_SIZE,
              num_beams: int | None = None, num_return_sequences: int = 1, max_new_tokens: int | None = None,
              length_penalty: float | None = None, max_source_length: int | None = None, scores: bool = True,
              coverage_penalty: float = 0.0, shortlist: VocabularyShortlist | None = None,
              glossary: Glossary | None = None, **generate_kwargs) -> list[list[Hypothesis]]:
    """Translate ``sentences``; returns, for each, its ``num_return_sequences`` best hypotheses, best first.

    The options are completed from the model's generation config as generate() completes them
    (:func:`resolve_options`, which every engine shares): without ``num_beams``, ``max_new_tokens`` or
    ``length_penalty``, the config's ``num_beams``, ``max_new_tokens`` / ``max_length``, ``length_penalty`` (its
    minimum lengths and the source-relative length bound ``max_len_a``/``max_len_b`` too, which ``generate_kwargs``
    may set: None for both turns the bound off); other ``generate`` arguments pass through. Then
    :func:`translate_with_options` decodes.

    ``coverage_penalty`` > 0 adds GNMT's coverage penalty with that beta to beam search (:mod:`hf_s2s.inference.penalties`);
    ``model`` may be a :class:`hf_s2s.inference.ensemble.Seq2SeqEnsemble`. ``shortlist``
    (:class:`hf_s2s.models.shortlist.VocabularyShortlist`, e.g. ``VocabularyShortlist.from_pretrained(folder)``):
    each sentence decodes over its source's shortlist. ``glossary`` (:class:`hf_s2s.models.term_constraints.Glossary`):
    each sentence's translation contains the target terms of the glossary's source terms it holds."""
    call = {name: generate_kwargs.pop(name) for name in OPTIONS if name in generate_kwargs}
    settings = {name: generate_kwargs[name] for name in SETTINGS if name in generate_kwargs}  # generate() decodes them
    options = resolve_options(model, num_beams=num_beams, num_return_sequences=num_return_sequences,
                              max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                              coverage_penalty=coverage_penalty, shortlist=shortlist is not None, glossary=glossary,
                              **call, **settings)
    if glossary is not None:  # every entry, then each sentence's terms together, before anything is decoded
        glossary.check(tokenizer, options.max_new_tokens)
        if sentences:
            glossary.target_terms(tokenizer(list(sentences))["input_ids"], tokenizer, options.max_new_tokens)
    return translate_with_options(model, tokenizer, sentences, options, batch_size=batch_size,
                                  max_source_length=max_source_length, scores=scores, generate_kwargs=generate_kwargs,
                                  shortlist=shortlist)


@torch.no_grad()
def translate_with_options(model, tokenizer, sentences: list[str], options: DecodingOptions, *,
                           batch_size: int = DEFAULT_BATCH_SIZE, max_source_length: int | None = None,
                           scores: bool = True, generate_kwargs: dict | None = None,
                           shortlist: VocabularyShortlist | None = None,
                           encoded: list[list[int]] | None = None) -> list[list[Hypothesis]]:
    """:func:`translate` with options already resolved for ``model`` (:func:`resolve_options` or the torch engine's
    :meth:`~hf_s2s.inference.engines.Engine.options`), which are not checked again; ``generate_kwargs``: further
    ``generate`` arguments (the options' own win); ``shortlist``: the shortlist ``options.shortlist`` decodes over;
    ``encoded``: each sentence's source ids when the caller has them already.

    Without ``max_source_length``, the tokenizer's ``model_max_length`` (the main job saves its
    ``--max_source_length`` there). Input lines are handled as by every engine
    (:func:`hf_s2s.inference.decoding.decode_lines`): a blank sentence (:func:`~hf_s2s.inference.decoding.is_blank`:
    nothing but whitespace, control and format characters) is not decoded: its hypotheses are empty with score 0,
    never an invented translation, and the output keeps one entry per input. Sources longer than the limit
    (``max_source_length``, the tokenizer's, or a learned position table's) are cut to it, and named in a warning.
    Sentences are decoded in batches of similar length.

    ``scores=False`` leaves each hypothesis' score None and saves the memory the scores take: ``generate`` then
    keeps no per-step scores, which under beam search are a (batch x beams, vocabulary) tensor per step (about
    1.6 GB for 128 sentences, 5 beams, 80 steps and 8,000 entries)."""
    generate_kwargs = {**(generate_kwargs or {}), **options.generate_kwargs()}
    limit, reason = _source_limit(tokenizer, max_source_length, [member.config for member in _members(model)])
    model.eval()
    eos_token_id = model.generation_config.eos_token_id
    decoder, tracking = model, nullcontext()
    if options.coverage_penalty:  # the coverage is kept in the decoding wrapper's cache (see hf_s2s.inference.penalties)
        decoder = model if isinstance(model, Seq2SeqEnsemble) else Seq2SeqEnsemble([model])
        processor = CoveragePenaltyLogitsProcessor(decoder, options.coverage_penalty, options.length_penalty,
                                                   eos_token_id, 1 + options.max_new_tokens)
        generate_kwargs["logits_processor"] = LogitsProcessorList([*generate_kwargs.get("logits_processor", []),
                                                                   processor])
        tracking = decoder.tracking_coverage()

    if options.shortlist != (shortlist is not None):
        raise ValueError("options.shortlist says whether to decode over a shortlist: pass the shortlist with it")
    if shortlist is not None:
        generate_kwargs["shortlist"] = shortlist

    def decode(sources: list[list[int]]) -> list[list[Hypothesis]]:
        terms = {} if options.glossary is None else {"target_terms": options.glossary.target_terms(sources, tokenizer)}
        return _translate_batch(decoder, tokenizer, sources, num_return_sequences=options.num_return_sequences,
                                scores=scores, eos_token_id=eos_token_id, generate_kwargs={**generate_kwargs, **terms})

    blank = [Hypothesis("", 0.0 if scores else None)] * options.num_return_sequences
    with tracking:
        return decode_lines(sentences, tokenizer_encoder(tokenizer), decode, limit=limit, reason=reason,
                            batch_size=batch_size, blank=blank, encoded=encoded)


def _translate_batch(model, tokenizer, sources: list[list[int]], *, num_return_sequences: int, scores: bool,
                     eos_token_id: int, generate_kwargs: dict) -> list[list[Hypothesis]]:
    """Each source's (token ids) hypotheses, decoded by one generate() call with ``generate_kwargs`` (the options of
    :meth:`~hf_s2s.inference.decoding.DecodingOptions.generate_kwargs` among them)."""
    batch = tokenizer.pad([{"input_ids": ids} for ids in sources], return_tensors="pt")
    batch = batch.to(next(model.parameters()).device)
    output = model.generate(**batch, output_scores=scores, return_dict_in_generate=True, **generate_kwargs)
    if not scores:
        values = [None] * len(output.sequences)
    elif generate_kwargs["num_beams"] > 1 and not generate_kwargs.get("do_sample"):
        values = output.sequences_scores.tolist()
    else:
        values = _greedy_scores(output, eos_token_id).tolist()
    texts = tokenizer.batch_decode(output.sequences, skip_special_tokens=True)
    n = num_return_sequences
    return [[Hypothesis(texts[j], values[j]) for j in range(row * n, (row + 1) * n)] for row in range(len(sources))]


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
    arguments (the length bound's) pass through. The sentence is read as :func:`translate` reads it (cut to the source
    limit, with the warning). The weights come from a teacher-forced pass over the generated translation, which gives
    the same attention as the decoding steps (``generate(output_attentions=True)``) and works for every model family.
    Only the eager kernel returns weights: a model using another is switched to eager for the pass and switched back
    afterwards."""
    check_models_support([model.config], alignment=True)
    if max_new_tokens is not None:
        check_positions(max_new_tokens, position_limit(model.config), f"max_new_tokens {max_new_tokens}")
    model.eval()
    device = next(model.parameters()).device
    source = encode_sources(tokenizer, [sentence], [0], *_source_limit(tokenizer, None, [model.config]))
    batch = tokenizer.pad({"input_ids": source}, return_tensors="pt").to(device)
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
