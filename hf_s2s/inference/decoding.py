"""What every engine shares (:mod:`hf_s2s.inference.engines`: ``generate()`` through
:func:`hf_s2s.inference.translate.translate_with_options`, CTranslate2 through
:func:`hf_s2s.inference.ctranslate2.translate_ctranslate2_with_options`, and the ONNX runtime,
:class:`hf_s2s.inference.onnx_runtime.OnnxSeq2Seq`).

- :meth:`DecodingOptions.resolve`: a call's options completed from a folder's generation config as ``generate()``
  completes them (the call's value, else the config's, else transformers' default, but for the families'
  own max_length), checked (:func:`check_values`, the one place each option's check lives), and every other setting
  of the config that changes the tokens refused by name where the engine does not implement it. :func:`check_call`
  runs the same checks on a command line's values alone, before any folder is read.
- :func:`decode_lines`: a blank line is not decoded (its hypotheses are blank), a source longer than the limit
  (:func:`source_limit`) is cut to it and named in one warning, and the rest is decoded in batches of similar length.

Standard library only: ``hf-s2s export-onnx`` ships this file beside ``onnx_runtime.py``, which runs where torch,
transformers and hf_s2s are not installed.
"""

import logging
import math
import unicodedata
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from numbers import Real

# One logger for the warning about cut sources, whichever path decodes (and in an ONNX export's copy of this file).
logger = logging.getLogger("hf_s2s.inference.decoding")

# The max_length generate() decodes an hf_s2s model with where neither the call nor the generation config sets
# a length (a folder without generation_config.json), counting the decoder's start token: the families' own
# (hf_s2s.models.modeling_common.DEFAULT_GENERATION_MAX_LENGTH), not transformers' generic 20; cut to the
# model's max_position_embeddings decoder positions. A copy, as the limits below are (tests/test_decoding.py
# proves it against generate()).
DEFAULT_MAX_LENGTH = 128
DEFAULT_LENGTH_PENALTY = 1.0
# Beam search divides a score by length ** penalty: GNMT's alpha and fairseq's --lenpen sit in [0, 2] (negative
# favours short outputs); within +-5, length ** penalty stays finite in float32 for any output of < 40,000 tokens.
LENGTH_PENALTY_LIMIT = 5.0
# The source-relative bound's largest values, as hf_s2s.models.modeling_common checks them for generate() (that file
# ships in model folders and cannot import this one; tests/test_decoding.py holds the two checks equal).
MAX_LEN_A_LIMIT = 100.0
MAX_LEN_B_LIMIT = 100_000
# Sentences named one by one in the warning about sources cut to the length limit; the count says how many more.
_SHOWN_CUTS = 10

# What a call may set, in generate()'s names: every engine decodes these (CTranslate2 refuses some combinations
# itself, hf_s2s.inference.ctranslate2.check_ctranslate2_options).
OPTIONS = ("num_beams", "num_return_sequences", "max_length", "max_new_tokens", "min_length", "min_new_tokens",
           "length_penalty", "early_stopping", "max_len_a", "max_len_b")
BOUND = ("max_len_a", "max_len_b")  # None given for both: no source-relative bound (not "not given")
# hf_s2s's own options beyond generate()'s, each with its value that turns it off: an engine decodes one only where it
# names it among the settings it implements (the torch engine implements them all). shortlist: decode over the
# folder's vocabulary shortlist (hf_s2s.models.shortlist); glossary: an hf_s2s.models.term_constraints.Glossary whose
# target terms each sentence's translation must contain (hf_s2s.models.term_constraints).
OWN_OPTIONS = {"coverage_penalty": 0.0, "shortlist": False, "glossary": None}
# hf-s2s translate's flag for each option that has one, named in the errors.
FLAGS = {"num_beams": "--beams", "num_return_sequences": "--nbest", "max_new_tokens": "--max-new-tokens",
         "length_penalty": "--length-penalty", "batch_size": "--batch-size", "max_len_a": "--max-len-a",
         "max_len_b": "--max-len-b", "no_length_bound": "--no-length-bound", "coverage_penalty": "--coverage-penalty",
         "shortlist": "--shortlist", "glossary": "--glossary"}
# Whole-number options and their least value (max_length counts the decoder's start token).
COUNTS = {"num_beams": 1, "num_return_sequences": 1, "max_new_tokens": 1, "max_length": 2, "min_length": 0,
          "min_new_tokens": 0}
# GNMT's beta: Wu et al. 2016 searched [0, 1], and on the reference models 0.05 already costs 6 to 9 BLEU (README);
# 10 leaves room to experiment while refusing typos and overflows (1e18, inf).
COVERAGE_PENALTY_LIMIT = 10.0

# The generation config's other fields that change the tokens, each with the value under which generate() decodes as
# without it. An engine names those it implements (the torch engine is generate(): all of them); a config (or call)
# that sets another is refused, naming it.
SETTINGS = {
    "do_sample": False, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None, "sequence_bias": None, "forced_bos_token_id": None,
    "forced_eos_token_id": None, "suppress_tokens": None, "begin_suppress_tokens": None,
    "exponential_decay_length_penalty": None, "renormalize_logits": False, "remove_invalid_values": False,
    "guidance_scale": None, "watermarking_config": None, "constraints": None, "force_words_ids": None,
    "num_beam_groups": 1, "diversity_penalty": 0.0, "penalty_alpha": None, "dola_layers": None, "max_time": None,
    "stop_strings": None,
}


def is_blank(sentence: str) -> bool:
    """Whether ``sentence`` holds nothing to learn from or translate: only whitespace, control and format characters
    (zero-width spaces and joiners, byte-order marks, soft hyphens: Unicode categories Cc and Cf), none of which a
    tokenizer trained here turns into a word. Translation keeps such lines blank; the corpus loader skips such pairs
    (:func:`hf_s2s.data.corpus.is_blank`, the same rule on the floor below: tests/test_decoding.py holds the two
    equal)."""
    return all(char.isspace() or unicodedata.category(char) in ("Cc", "Cf") for char in sentence)


# ---------------------------------------------------------------------------------------------------- checks


def check_count(name: str, value, low: int = 1) -> None:
    """A whole number >= ``low``, else a ValueError naming the option (and its flag)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        flag = f" ({FLAGS[name]})" if name in FLAGS else ""
        raise ValueError(f"{name}{flag} must be a whole number >= {low}, got {value!r}")


def check_number(name: str, flag: str, value, low: float, high: float, meaning: str) -> None:
    """A finite real number in [low, high], else a ValueError naming the option, its flag, the value and the range."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} ({flag}) must be a finite number in [{low:g}, {high:g}] ({meaning}), got {value!r}")


def check_length_penalty(length_penalty) -> None:
    check_number("length_penalty", FLAGS["length_penalty"], length_penalty, -LENGTH_PENALTY_LIMIT, LENGTH_PENALTY_LIMIT,
                 "beam scores are divided by length ** penalty; 1.0: the mean token log-probability")


def check_beams(num_beams: int, num_return_sequences: int, do_sample: bool = False) -> None:
    if num_return_sequences > num_beams and not do_sample:
        raise ValueError(f"num_return_sequences ({num_return_sequences}, --nbest) must be <= num_beams "
                         f"({num_beams}, --beams): beam search returns at most one hypothesis per beam")


def check_length_bound(max_len_a, max_len_b, complete: bool = True, names: tuple[str, str] = BOUND) -> None:
    """Raise a ValueError naming the field, the value and what is allowed for a bad ``max_len_a`` (a number in
    [0, MAX_LEN_A_LIMIT]) or ``max_len_b`` (a whole number in [0, MAX_LEN_B_LIMIT]); None for both turns the bound
    off, None for one counts as 0. ``complete=False`` checks only the values given: None is then "not given" (a command
    line's flags, which the generation config completes), and a bound of 0 tokens is found once the config is known."""
    if max_len_a is not None and (isinstance(max_len_a, bool) or not isinstance(max_len_a, Real)
                                  or not math.isfinite(max_len_a) or max_len_a < 0):
        raise ValueError(f"max_len_a (output tokens per source token) must be a number >= 0 (None: no "
                         f"source-relative length bound), got {max_len_a!r}")
    if max_len_b is not None and (isinstance(max_len_b, bool) or not isinstance(max_len_b, int) or max_len_b < 0):
        raise ValueError(f"max_len_b (output tokens added to max_len_a x source tokens) must be a whole number >= 0 "
                         f"(None: no source-relative length bound), got {max_len_b!r}")
    for name, value, limit, meaning in ((names[0], max_len_a, MAX_LEN_A_LIMIT, "output tokens per source token"),
                                        (names[1], max_len_b, MAX_LEN_B_LIMIT, "tokens added to the bound")):
        if value is not None and value > limit:
            raise ValueError(f"{name} must be <= {limit:g} ({meaning}), got {value!r}: so large a bound never binds "
                             "(the absolute limit, max_length or max_new_tokens, comes first); give a value up to "
                             f"{limit:g}, or decode without the bound")
    if complete and (max_len_a == 0 and max_len_b in (0, None) or max_len_a is None and max_len_b == 0):
        raise ValueError(f"max_len_a={max_len_a!r} with max_len_b={max_len_b!r} bounds every output to 0 tokens; "
                         "set max_len_a or max_len_b above 0, or both to None for no bound")


def check_length_bound_flags(max_len_a, max_len_b, flags: tuple[str, str], complete: bool = False) -> None:
    """:func:`check_length_bound` on a command line's values, each error naming the flags (``flags``): an upper limit
    by its own flag, the others prefixed with both."""
    try:
        check_length_bound(max_len_a, max_len_b, complete=complete, names=flags)
    except ValueError as error:
        if str(error).startswith(flags):
            raise
        raise ValueError(f"{flags[0]}/{flags[1]}: {error}") from None


def check_positions(new_tokens: int, position_limit: int | None, given: str, model: str = "the model") -> None:
    """Refuse more new tokens than a learned position table holds: the decoder embeds the start token and every
    generated token but the last. ``given`` says where ``new_tokens`` comes from, ``model`` names the model."""
    if position_limit is not None and new_tokens > position_limit:
        raise ValueError(f"{given} is beyond {model}'s learned position table of {position_limit} positions (its "
                         f"decoder embeds the start token and every generated token but the last): give at most "
                         f"{position_limit}")


def check_settings(config: dict, engine: str, implements: Collection[str], given: Collection[str] = ()) -> None:
    """Refuse a generation setting (``SETTINGS``) or an option of hf_s2s's own (``OWN_OPTIONS``) that ``config`` sets
    to change the tokens and that ``engine`` does not implement (``implements``), naming it and where it is set
    (``given``: the call's names; the others, the generation config's)."""
    for name, neutral in {**SETTINGS, **OWN_OPTIONS}.items():
        value = config.get(name)
        unset = value is None or value == neutral or (neutral is None and value in ([], ()))
        if name not in implements and not unset:
            where = "the call" if name in given else "the generation config"
            flag = f" ({FLAGS[name]})" if name in FLAGS else ""
            default = "off" if name in OWN_OPTIONS else "generate()'s default"
            raise ValueError(f"{where} sets {name}={value!r}{flag}, which {engine} does not implement: set it to "
                             f"{neutral!r} ({default}), or decode with generate() (the torch engine, --engine torch)")


def check_coverage_penalty(coverage_penalty, num_beams: int | None, do_sample: bool = False) -> None:
    """GNMT's coverage penalty beta in [0, COVERAGE_PENALTY_LIMIT], on beam search only (``num_beams`` None: not known
    yet)."""
    check_number("coverage_penalty", FLAGS["coverage_penalty"], coverage_penalty, 0.0, COVERAGE_PENALTY_LIMIT,
                 "GNMT's beta; 0 = off")
    if coverage_penalty and (num_beams == 1 or do_sample):
        raise ValueError(f"coverage_penalty (--coverage-penalty {coverage_penalty}) re-ranks beam search hypotheses: "
                         "it needs num_beams (--beams) > 1 and no sampling")


def check_values(values: dict, complete: bool = True) -> None:
    """Every value of ``values`` (``OPTIONS``, ``OWN_OPTIONS``, generate()'s names), checked: the one place each
    option's check lives. ``complete``: the options as they decode (DecodingOptions.resolve: unset ones take
    generate()'s defaults, and the length bound None for both is off); else a command line's values before any
    folder is read (None: not given, so the checks that need two values run only where both are given), the errors
    naming its flags."""
    for name, low in COUNTS.items():
        if values.get(name) is not None:
            check_count(name, values[name], low)
    if values.get("length_penalty") is not None:
        check_length_penalty(values["length_penalty"])
    if values.get("early_stopping") not in (None, True, False, "never"):
        raise ValueError(f"early_stopping must be True, False or 'never', got {values['early_stopping']!r}")
    max_len_a, max_len_b = values.get("max_len_a"), values.get("max_len_b")
    if complete:
        check_length_bound(max_len_a, max_len_b)
    else:
        check_length_bound_flags(max_len_a, max_len_b, (FLAGS["max_len_a"], FLAGS["max_len_b"]),
                                 complete=None not in (max_len_a, max_len_b))
    do_sample = bool(values.get("do_sample"))
    default = 1 if complete else None  # generate()'s beam count and hypotheses per sentence; else not known yet
    num_beams, num_return_sequences = (default if values.get(name) is None else values[name]
                                       for name in ("num_beams", "num_return_sequences"))
    if num_beams is not None and num_return_sequences is not None:
        check_beams(num_beams, num_return_sequences, do_sample)
    if values.get("coverage_penalty") is not None:
        check_coverage_penalty(values["coverage_penalty"], num_beams, do_sample)
    if values.get("shortlist") not in (None, True, False):
        raise ValueError(f"shortlist (--shortlist) must be True or False, got {values['shortlist']!r}")


def check_call(**call) -> None:
    """A command line's decoding options (generate()'s names; None: not given, the generation config decides), checked
    before any folder is read, so that a wrong value costs no loading (:func:`check_values`, ``complete=False``):
    :meth:`DecodingOptions.resolve` checks them again with the values the generation config completes them with."""
    unknown = sorted(set(call) - set(OPTIONS) - set(OWN_OPTIONS))
    if unknown:
        raise ValueError(f"unknown decoding option(s) {', '.join(unknown)}; allowed: {', '.join(OPTIONS)}, "
                         f"{', '.join(OWN_OPTIONS)}")
    check_values(call, complete=False)


def length_bound_call(max_len_a: float | None, max_len_b: int | None, no_length_bound: bool,
                      flags: tuple[str, str, str] = ("max_len_a", "max_len_b", "no_length_bound")) -> dict:
    """The source-relative length bound's call options (generate()'s names) from a command line's or a request's three
    (named by ``flags`` in the error): the values given (None: not given, the generation config keeps its own), or None
    for both when ``no_length_bound`` turns the bound off, which values given beside it contradict (a ValueError)."""
    given = {name: value for name, value in zip(BOUND, (max_len_a, max_len_b), strict=True) if value is not None}
    if no_length_bound and given:
        named = " and ".join(flag for flag, name in zip(flags, BOUND, strict=False) if name in given)
        raise ValueError(f"{flags[2]} turns the length bound off; it cannot be combined with {named}")
    return dict.fromkeys(BOUND) if no_length_bound else given


# ---------------------------------------------------------------------------------------------------- options


def _new_tokens(config: dict, given: Collection[str], max_position_embeddings: int | None) -> tuple[int, str]:
    """The most tokens generate() generates with ``config`` (the call's values over the generation config's), and
    where that comes from, for the errors: ``max_new_tokens``, else ``max_length`` (which counts the decoder's start
    token), else :data:`DEFAULT_MAX_LENGTH`, cut to ``max_position_embeddings`` decoder positions."""
    if config.get("max_new_tokens") is not None:
        where = "max_new_tokens (--max-new-tokens)" if "max_new_tokens" in given else \
            "the generation config's max_new_tokens"
        return config["max_new_tokens"], f"{where} {config['max_new_tokens']}"
    if config.get("max_length") is not None:
        where = "max_length" if "max_length" in given else "the generation config's max_length"
        new_tokens = config["max_length"] - 1
        return new_tokens, f"{where} {config['max_length']} ({new_tokens} new tokens)"
    new_tokens = min(DEFAULT_MAX_LENGTH, max_position_embeddings or math.inf) - 1
    return new_tokens, f"the default of {new_tokens} new tokens"


@dataclass(frozen=True)
class DecodingOptions:
    """What decides a translation's tokens, complete (nothing left for the generation config to fill), as
    :meth:`resolve` builds it: requests whose options are equal decode alike, so a server may batch them together."""

    num_beams: int  # 1: greedy search
    num_return_sequences: int  # hypotheses returned per sentence, best first (<= num_beams)
    max_new_tokens: int  # the most tokens a hypothesis generates, </s> included
    min_new_tokens: int  # tokens generated before </s> may come
    length_penalty: float  # beam search divides a finished hypothesis' score by length ** penalty
    early_stopping: bool | str | None  # beam search's stopping rule, True, False or "never"; None: unset (False)
    max_len_a: float | None  # the source-relative bound: at most floor(max_len_a x source tokens + max_len_b) tokens,
    max_len_b: int | None  # </s> included (None for both: no bound)
    suppress_tokens: tuple[int, ...]  # never generated (the generation config's)
    coverage_penalty: float = 0.0  # GNMT's coverage penalty beta on beam search (0: off; hf_s2s.inference.penalties)
    shortlist: bool = False  # decode over the folder's vocabulary shortlist
    # an hf_s2s.models.term_constraints.Glossary (hashable: requests with equal ones batch together)
    glossary: object = None

    @classmethod
    def resolve(cls, generation_config: dict, *, engine: str = "generate()", implements: Collection[str] | None = None,
                max_position_embeddings: int | None = None, position_limit: int | None = None,
                model: str = "the model", **call) -> "DecodingOptions":
        """The options of a call, completed as generate() completes them.

        generation_config: the folder's (generation_config.json, or a ``GenerationConfig.to_dict()``), None values
        unset, with the length bound a folder saved without it decodes with. call: ``OPTIONS`` and ``SETTINGS`` in
        generate()'s names; a value None is not given (the config decides), but ``max_len_a``/``max_len_b`` None are
        given: no bound. As generate(): ``max_new_tokens`` wins over ``max_length`` (which counts the start token),
        wherever each is set; without either, ``DEFAULT_MAX_LENGTH`` - 1 new tokens, at most
        ``max_position_embeddings`` positions; and
        ``min_new_tokens`` over ``min_length`` alike.

        implements: the ``SETTINGS`` and ``OWN_OPTIONS`` the engine decodes (None: all, generate() itself); another one
        set to change the tokens is a ValueError naming it and ``engine``. position_limit: a learned position table's
        rows (None: no limit), which more new tokens than it holds is refused against, naming ``model``. Bad values
        are a ValueError naming the option and what is allowed (:func:`check_values`)."""
        unknown = sorted(set(call) - set(OPTIONS) - set(SETTINGS) - set(OWN_OPTIONS))
        if unknown:
            raise ValueError(f"unknown decoding option(s) {', '.join(unknown)}; allowed: {', '.join(OPTIONS)}, "
                             f"{', '.join(OWN_OPTIONS)}")
        given = {name: value for name, value in call.items() if value is not None or name in BOUND}
        if given.get("max_new_tokens") is not None and given.get("max_length") is not None:
            raise ValueError(f"give max_new_tokens ({given['max_new_tokens']}) or max_length ({given['max_length']}), "
                             "not both")
        config = {**generation_config, **given}

        def get(name, default=None):
            value = config.get(name)
            return default if value is None else value

        if implements is not None:
            check_settings(config, engine, implements, given)
        check_values(config)
        max_new_tokens, source = _new_tokens(config, given, max_position_embeddings)
        check_positions(max_new_tokens, position_limit, source, model)
        return cls(num_beams=get("num_beams", 1), num_return_sequences=get("num_return_sequences", 1),
                   max_new_tokens=max_new_tokens,
                   min_new_tokens=get("min_new_tokens", max(get("min_length", 0) - 1, 0)),
                   length_penalty=float(get("length_penalty", DEFAULT_LENGTH_PENALTY)),
                   early_stopping=config.get("early_stopping"), max_len_a=config.get("max_len_a"),
                   max_len_b=config.get("max_len_b"),
                   suppress_tokens=tuple(int(token) for token in get("suppress_tokens", ())),
                   coverage_penalty=float(get("coverage_penalty", 0.0)), shortlist=bool(get("shortlist", False)),
                   glossary=config.get("glossary"))

    def decoding_kwargs(self) -> dict:
        """The options as ``translate`` / ``translate_ctranslate2`` / ``OnnxSeq2Seq.translate`` keyword arguments
        (``OPTIONS``, and ``OWN_OPTIONS`` that are on): resolving them again gives these options."""
        call = {name: getattr(self, name) for name in ("num_beams", "num_return_sequences", "max_new_tokens",
                                                        "min_new_tokens", "length_penalty", *BOUND)}
        if self.early_stopping is not None:
            call["early_stopping"] = self.early_stopping
        return {**call, **{name: getattr(self, name) for name, off in OWN_OPTIONS.items() if getattr(self, name) != off}}

    def generate_kwargs(self) -> dict:
        """The options as ``generate()`` arguments (``OWN_OPTIONS`` left out: generate() has none of them). The minimum
        goes as ``min_length`` (start token counted): generate() warns about a ``min_new_tokens`` given where the
        model's generation config sets ``min_length``."""
        kwargs = {name: value for name, value in self.decoding_kwargs().items() if name not in OWN_OPTIONS}
        return {**kwargs, "min_length": 1 + self.min_new_tokens, "min_new_tokens": None}


# ---------------------------------------------------------------------------------------------------- input lines


def source_limit(model_max_length: int | None, max_source_length: int | None = None,
                 position_limit: int | None = None) -> tuple[int | None, str]:
    """Where sources are cut, and why: ``max_source_length`` when given, else the tokenizer's ``model_max_length`` (a
    folder written by the training job sets it to the run's ``--max_source_length``; None: no limit), or a learned
    position table's rows where that is shorter (a longer source cannot be embedded)."""
    limit, reason = ((max_source_length, "max_source_length") if max_source_length is not None
                     else (model_max_length, "the tokenizer's model_max_length"))
    if position_limit is not None and (limit is None or position_limit < limit):
        limit, reason = position_limit, "the model's learned position table"
    return limit, reason


# encode(texts, max_length) -> each text's token ids, </s> included; max_length None: whole, else cut to it as the
# tokenizer truncates (its first tokens and its </s>)
Encode = Callable[[list[str], int | None], list[list[int]]]


def encode_lines(sentences: Sequence[str], indices: Sequence[int], encode: Encode, limit: int | None,
                 reason: str = "max_source_length", encoded: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
    """The token ids of ``sentences[i]`` for each i in ``indices``, each cut to ``limit`` tokens when longer. The
    sentences that were cut are named in a warning: their number from 1 (the input's line number) and length, and
    ``reason``, where the limit comes from. ``encoded``: the ids of every sentence, ``encode``'s already (a server
    tokenizes a request once, when it arrives), used instead of encoding them again."""
    if not indices:
        return []  # a fast tokenizer raises on an empty batch
    if encoded is not None:
        encoded = [list(encoded[i]) for i in indices]
    else:
        encoded = encode([sentences[i] for i in indices], None)
    if limit is None:
        return encoded
    cut = [position for position, ids in enumerate(encoded) if len(ids) > limit]
    if cut:
        lengths = [len(encoded[position]) for position in cut]
        for position, ids in zip(cut, encode([sentences[indices[position]] for position in cut], limit), strict=True):
            encoded[position] = ids
        named = ", ".join(f"{indices[position] + 1} ({length} tokens)"
                          for position, length in list(zip(cut, lengths, strict=True))[:_SHOWN_CUTS])
        more = f" and {len(cut) - _SHOWN_CUTS} more" if len(cut) > _SHOWN_CUTS else ""
        logger.warning("%d of %d sentences are longer than the %d source tokens the model reads (%s) and are "
                       "translated cut to them: %s %s%s", len(cut), len(sentences), limit, reason,
                       "line" if len(cut) == 1 else "lines", named, more)
    return encoded


def batches_by_length(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), so little compute goes to padding."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def decode_lines(sentences: Sequence[str], encode: Encode, decode: Callable[[list[list[int]]], list], *,
                 limit: int | None, reason: str, batch_size: int, blank: list,
                 encoded: Sequence[Sequence[int]] | None = None) -> list[list]:
    """Each sentence's hypotheses, in input order: ``decode(sources)`` gives one entry per source of a batch (token
    ids, longest first, ``batch_size`` at most); a blank sentence (:func:`is_blank`) is not decoded and gets a copy of
    ``blank``, never an invented translation. Sources are encoded (unless ``encoded`` holds their ids already) and cut
    to ``limit`` (``reason``: where it comes from) by :func:`encode_lines`."""
    check_count("batch_size", batch_size)
    if encoded is not None and len(encoded) != len(sentences):
        raise ValueError(f"encoded holds {len(encoded)} sentences' ids for {len(sentences)} sentences")
    results = [list(blank) for _ in sentences]
    to_decode = [i for i, sentence in enumerate(sentences) if not is_blank(sentence)]
    encoded = encode_lines(sentences, to_decode, encode, limit, reason, encoded)
    for positions in batches_by_length([len(ids) for ids in encoded], batch_size):
        for position, hypotheses in zip(positions, decode([encoded[p] for p in positions]), strict=True):
            results[to_decode[position]] = hypotheses
    return results
