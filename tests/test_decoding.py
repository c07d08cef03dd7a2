"""The decoding options every engine shares (hf_s2s.inference.decoding): completed from a generation config as
generate() completes them, checked, and what an engine does not implement refused by name.

The lengths are proved against generate() itself, not against a table of expected numbers: a random model whose
end token is pushed to the top wherever generate() allows it ends each output at its earliest allowed length, and
with the end token banned it runs to its longest; both must be the lengths the options resolve to."""

import re

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from hf_s2s.data import corpus
from hf_s2s.inference import decoding
from hf_s2s.inference.decoding import DecodingOptions
from hf_s2s.inference.translate import generation_settings, resolve_options
from hf_s2s.models import modeling_common
from tests.helpers import random_tiny_model

EOS = 2
SOURCES = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])


class PushEos(LogitsProcessor):
    """Makes </s> the best token wherever the processors before it left it allowed (``ban=False``), or bans it."""

    def __init__(self, ban: bool):
        self.ban = ban

    def __call__(self, input_ids, scores):
        if self.ban:
            scores[:, EOS] = -float("inf")
        else:
            allowed = ~scores[:, EOS].isneginf()
            scores[allowed, EOS] = scores[allowed].max(dim=-1).values + 1.0
        return scores


def generated_lengths(model, prefer_eos: bool, **call) -> list[int]:
    """New tokens generate() gives each row (</s> included): the fewest allowed (``prefer_eos``), or the most."""
    processors = LogitsProcessorList([PushEos(ban=not prefer_eos)])
    with torch.no_grad():
        rows = model.generate(input_ids=SOURCES, attention_mask=(SOURCES != 0).long(), logits_processor=processors,
                              **call)[:, 1:].tolist()
    return [row.index(EOS) + 1 if EOS in row else len(row) for row in rows]


# (the generation config's length fields, the call's): generate()'s precedence between them, wherever each is set
LENGTHS = {
    "config max_new_tokens over its max_length": ({"max_new_tokens": 4, "max_length": 128}, {}),
    "config max_length": ({"max_length": 6}, {}),
    "config max_new_tokens over the call's max_length": ({"max_new_tokens": 4}, {"max_length": 9}),
    "call max_new_tokens over config max_new_tokens": ({"max_new_tokens": 4}, {"max_new_tokens": 7}),
    "call max_new_tokens over config max_length": ({"max_length": 6}, {"max_new_tokens": 9}),
    "neither: the family's max_length 128": ({"max_length": None}, {}),
    "config min_length": ({"min_length": 5, "max_new_tokens": 9}, {}),
    "config min_new_tokens over its min_length": ({"min_length": 7, "min_new_tokens": 2, "max_new_tokens": 9}, {}),
    "config min_new_tokens over the call's min_length": ({"min_new_tokens": 2, "max_new_tokens": 9}, {"min_length": 7}),
    "call min_new_tokens": ({"min_length": 7, "max_new_tokens": 9}, {"min_new_tokens": 3}),
}


@pytest.mark.parametrize("case", list(LENGTHS))
def test_lengths_resolve_as_generate_decodes_them(case):
    config, call = LENGTHS[case]
    model = random_tiny_model("transformer_seq2seq", 30, seed=1)
    model.generation_config.update(max_len_a=None, max_len_b=None, **config)  # no source-relative bound
    options = resolve_options(model, **call)
    assert generated_lengths(model, prefer_eos=False, **call) == [options.max_new_tokens] * 2
    assert generated_lengths(model, prefer_eos=True, **call) == [options.min_new_tokens + 1] * 2
    # as an engine hands them to generate(): the same outputs from the options alone
    assert generated_lengths(model, prefer_eos=False, **options.generate_kwargs()) == [options.max_new_tokens] * 2
    assert generated_lengths(model, prefer_eos=True, **options.generate_kwargs()) == [options.min_new_tokens + 1] * 2


def test_generates_default_length_is_cut_to_the_position_table():
    """Without max_length or max_new_tokens, generate() decodes the family's 127 new tokens (max_length
    128), or up to max_position_embeddings decoder positions when that is fewer (here a learned table of
    8)."""
    model = random_tiny_model("transformer_seq2seq", 30, seed=1, position_embedding_type="learned",
                              max_position_embeddings=8)
    model.generation_config.update(max_length=None, max_len_a=None, max_len_b=None)
    options = resolve_options(model)
    assert options.max_new_tokens == 7
    assert generated_lengths(model, prefer_eos=False) == [7, 7]


def test_resolving_the_resolved_options_gives_them_back():
    model = random_tiny_model("rnn_seq2seq", 30)
    model.generation_config.update(num_beams=4, length_penalty=0.5, min_length=3, early_stopping="never",
                                   suppress_tokens=[7])
    options = resolve_options(model, max_len_a=0.5, num_return_sequences=2)
    assert options == DecodingOptions(num_beams=4, num_return_sequences=2, max_new_tokens=127, min_new_tokens=2,
                                      length_penalty=0.5, early_stopping="never", max_len_a=0.5,
                                      max_len_b=model.generation_config.max_len_b, suppress_tokens=(7,))
    assert resolve_options(model, **options.decoding_kwargs()) == options


@pytest.mark.parametrize(("setting", "value"), [("no_repeat_ngram_size", 2), ("repetition_penalty", 1.2),
                                                ("do_sample", True), ("suppress_tokens", [5])])
def test_a_setting_an_engine_does_not_implement_is_refused_by_name(setting, value):
    config = generation_settings(random_tiny_model("transformer_seq2seq", 30).generation_config)
    assert DecodingOptions.resolve({**config, setting: value}) is not None  # generate() implements everything
    with pytest.raises(ValueError, match=re.escape(f"the generation config sets {setting}={value!r}, which the X "
                                                   "engine does not implement: set it to")):
        DecodingOptions.resolve({**config, setting: value}, engine="the X engine", implements=())
    with pytest.raises(ValueError, match=f"the call sets {setting}"):
        DecodingOptions.resolve(config, engine="the X engine", implements=(), **{setting: value})
    assert DecodingOptions.resolve({**config, setting: value}, engine="X", implements=(setting,)) is not None


@pytest.mark.parametrize(("call", "message"), [
    ({"num_beams": 0}, r"num_beams \(--beams\) must be a whole number >= 1, got 0"),
    ({"num_beams": 2, "num_return_sequences": 3}, r"num_return_sequences \(3, --nbest\) must be <= num_beams"),
    ({"max_new_tokens": 0}, r"max_new_tokens \(--max-new-tokens\) must be a whole number >= 1"),
    ({"max_new_tokens": 5, "max_length": 6}, "give max_new_tokens .* or max_length .*, not both"),
    ({"length_penalty": 1e9}, r"length_penalty \(--length-penalty\) must be a finite number in \[-5, 5\]"),
    ({"early_stopping": "sometimes"}, "early_stopping must be True, False or 'never'"),
    ({"max_len_a": 0, "max_len_b": 0}, "bounds every output to 0 tokens"),
    ({"max_new_tokens": 9}, "max_new_tokens .* 9 is beyond the model's learned position table of 8 positions"),
    ({"min_new_tokens": -1}, "min_new_tokens must be a whole number >= 0"),
    ({"beams": 2}, "unknown decoding option.*beams"),
])
def test_impossible_options_are_refused_naming_them(call, message):
    model = random_tiny_model("transformer_seq2seq", 30, position_embedding_type="learned", max_position_embeddings=8)
    model.generation_config.max_length = 8
    with pytest.raises(ValueError, match=message):
        resolve_options(model, **call)


@pytest.mark.parametrize(("call", "message"), [
    ({"num_beams": 0}, r"num_beams \(--beams\) must be a whole number >= 1, got 0"),
    ({"num_beams": 2, "num_return_sequences": 0}, r"num_return_sequences \(--nbest\) must be a whole number >= 1"),
    ({"num_beams": 2, "num_return_sequences": 3}, r"num_return_sequences \(3, --nbest\) must be <= num_beams"),
    ({"num_beams": 2, "max_new_tokens": 0}, r"max_new_tokens \(--max-new-tokens\) must be a whole number >= 1"),
    ({"max_len_a": 1e18}, r"--max-len-a must be <= 100 \(output tokens per source token\)"),
    ({"max_len_a": 0.0, "max_len_b": 0}, "bounds every output to 0 tokens"),
    ({"num_beams": 1, "coverage_penalty": 0.2}, r"it needs num_beams \(--beams\) > 1"),
    ({"beams": 2}, "unknown decoding option.*beams"),
])
def test_a_command_lines_values_are_refused_alone_naming_the_flag(call, message):
    """What a command line gives is checked before any folder is read, by the checks the resolved options pass."""
    with pytest.raises(ValueError, match=message):
        decoding.check_call(**call)


def test_a_command_line_value_the_generation_config_completes_is_not_refused_alone():
    """--nbest 3 without --beams: the folder's beam count decides, so only resolve() can refuse it."""
    decoding.check_call(num_return_sequences=3, max_len_b=0, coverage_penalty=0.2)
    config = generation_settings(random_tiny_model("transformer_seq2seq", 30).generation_config)
    assert DecodingOptions.resolve({**config, "num_beams": 4}, num_return_sequences=3,
                                   coverage_penalty=0.2).coverage_penalty == 0.2
    with pytest.raises(ValueError, match="num_return_sequences"):
        DecodingOptions.resolve({**config, "num_beams": 1}, num_return_sequences=3)


@pytest.mark.parametrize(("max_len_a", "max_len_b"), [
    (-1.0, 5), ("1.3", 5), (float("nan"), 5), (True, 5), (1.3, -2), (1.3, 2.5), (0, 0), (None, 0), (1e18, 5),
    (1.3, 10**20), (0, None)])
def test_the_bound_is_checked_as_generate_checks_it(max_len_a, max_len_b):
    """The model files' check (what generate() runs, in a folder loaded without hf_s2s) and the engines' (in an ONNX
    export without torch) are two copies: they refuse the same values with the same words."""
    with pytest.raises(ValueError) as in_the_model:
        modeling_common.check_length_bound(max_len_a, max_len_b)
    with pytest.raises(ValueError) as in_the_engines:
        decoding.check_length_bound(max_len_a, max_len_b)
    assert str(in_the_engines.value) == str(in_the_model.value)
    assert (decoding.MAX_LEN_A_LIMIT, decoding.MAX_LEN_B_LIMIT) == (modeling_common.MAX_LEN_A_LIMIT,
                                                                    modeling_common.MAX_LEN_B_LIMIT)


def test_blank_lines_are_what_the_corpus_loader_skips():
    """Two copies of one rule (the corpus loader sits below inference, and an ONNX export ships decoding.py alone)."""
    lines = ["", " ", "\t\r", "\u200b\u200d", "\ufeff", "\u00ad", "\u2060 ", "a", " a ", "\u200ba", "\u00e9"]
    assert [decoding.is_blank(line) for line in lines] == [corpus.is_blank(line) for line in lines]
    assert [decoding.is_blank(line) for line in lines] == [True] * 7 + [False] * 4
