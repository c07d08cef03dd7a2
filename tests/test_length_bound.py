"""The output-length bound relative to the source (``max_len_a * source tokens + max_len_b``, fairseq's): a row
ends with </s> exactly at its own bound while longer sources continue, under greedy search, beam search and
sampling, in both families; batched == single; the bound travels in generation_config.json; off, generate() is
transformers' own; bad values are refused before decoding. Tiny random models whose </s> is an id they rarely
pick, so rows run to their limit unless the bound ends them."""

import json
import logging
import math

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM

from hf_s2s.models.modeling_common import (
    DEFAULT_MAX_LEN_A,
    DEFAULT_MAX_LEN_B,
    GenerationLengthDefault,
    SourceLengthBoundLogitsProcessor,
    source_length_bound,
)
from tests import syncs
from tests.helpers import FAMILIES, random_tiny_model
from tests.runs import tiny_args

VOCAB, PAD, START, EOS = 23, 0, 1, 22
OFF = {"max_len_a": None, "max_len_b": None}
# real source tokens per row: 9, 3 and 6 (</s> of the source included)
SOURCES = [[5, 9, 4, 7, 8, 3, 6, 10, 2], [8, 3, 2], [11, 12, 13, 14, 15, 2]]
DECODINGS = {"greedy": {}, "beam": {"num_beams": 3}, "sampling": {"do_sample": True, "num_return_sequences": 2, "top_k": 3}}


def model_of(model_type):
    return random_tiny_model(model_type, VOCAB, seed=1, pad_token_id=PAD, bos_token_id=START,
                             decoder_start_token_id=START, eos_token_id=EOS)


def source_batch(rows=SOURCES):
    width = max(len(row) for row in rows)
    input_ids = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
    return input_ids, (input_ids != PAD).long()


def generate(model, rows=SOURCES, **kwargs):
    input_ids, attention_mask = source_batch(rows)
    torch.manual_seed(0)
    with torch.no_grad():
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, max_length=40, **kwargs)


def eos_positions(sequences):
    """Position of each row's first </s> (the start token is position 0); None where a row has none."""
    return [row.index(EOS) if EOS in row else None for row in sequences.tolist()]


@pytest.mark.slow
@pytest.mark.parametrize("decoding", DECODINGS)
@pytest.mark.parametrize("model_type", FAMILIES)
def test_each_row_ends_with_eos_exactly_at_its_bound_while_longer_sources_continue(model_type, decoding):
    model = model_of(model_type)
    kwargs = DECODINGS[decoding]
    copies = kwargs.get("num_return_sequences", 1)
    unbounded = generate(model, **kwargs, **OFF)
    # no row stops by itself before the bounds below (the longest is 11)
    assert all(position is None or position > 11 for position in eos_positions(unbounded))
    for a, b in ((1.0, 2), (0.5, 3)):
        sequences = generate(model, **kwargs, max_len_a=a, max_len_b=b)
        bounds = [math.floor(a * len(row) + b) for row in SOURCES for _ in range(copies)]  # 11, 5, 8 / 7, 4, 6
        assert eos_positions(sequences) == bounds  # n generated tokens, the n-th is </s>
        assert sequences.shape[1] == max(bounds) + 1  # the longest source's row ran on to its own bound
        for row, bound in zip(sequences.tolist(), bounds, strict=True):
            assert set(row[bound + 1:]) <= {PAD, EOS}  # beam search fills with </s> when pad is 0 (transformers)
        if decoding == "greedy":  # what comes before the bound is what the unbounded model says
            for row, full, bound in zip(sequences.tolist(), unbounded.tolist(), bounds, strict=True):
                assert row[:bound] == full[:bound]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_absolute_length_limit_still_applies_and_the_shorter_one_wins(model_type):
    model = model_of(model_type)
    sequences = generate(model, max_len_a=1.0, max_len_b=2, max_new_tokens=6)  # bounds 11, 5, 8
    assert sequences.shape[1] == 7
    assert eos_positions(sequences) == [None, 5, None]  # cut at 6 new tokens like today, without </s>


@pytest.mark.parametrize("decoding", ["greedy", "beam"])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_batched_equals_single_with_the_bound(model_type, decoding):
    model = model_of(model_type)
    kwargs = {**DECODINGS[decoding], "max_len_a": 0.5, "max_len_b": 3, "output_scores": True,
              "return_dict_in_generate": True}
    batched = generate(model, **kwargs)
    for index, row in enumerate(SOURCES):
        single = generate(model, rows=[row], **kwargs)
        length = single.sequences.shape[1]
        assert batched.sequences[index, :length].tolist() == single.sequences[0].tolist()
        assert set(batched.sequences[index, length:].tolist()) <= {PAD, EOS}
        if decoding == "beam":
            torch.testing.assert_close(batched.sequences_scores[index], single.sequences_scores[0])


@pytest.mark.slow
@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_bound_is_saved_in_generation_config_json_and_reloads(model_type, tmp_path):
    model = model_of(model_type)
    config = model.generation_config
    assert (config.max_len_a, config.max_len_b) == (DEFAULT_MAX_LEN_A, DEFAULT_MAX_LEN_B)  # a new model's default
    config.max_len_a, config.max_len_b = 0.5, 3
    model.save_pretrained(tmp_path / "bound")
    saved = json.loads((tmp_path / "bound" / "generation_config.json").read_text())
    assert (saved["max_len_a"], saved["max_len_b"]) == (0.5, 3)
    reloaded = type(model).from_pretrained(tmp_path / "bound")
    assert (reloaded.generation_config.max_len_a, reloaded.generation_config.max_len_b) == (0.5, 3)
    assert generate(reloaded).tolist() == generate(model).tolist() == generate(model, max_len_a=0.5, max_len_b=3).tolist()

    config.max_len_a = config.max_len_b = None  # saved off stays off
    model.save_pretrained(tmp_path / "off")
    assert eos_positions(generate(type(model).from_pretrained(tmp_path / "off"))) == [None] * len(SOURCES)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_generation_config_saved_without_the_fields_decodes_with_the_default_bound(model_type, tmp_path):
    """A folder saved before the bound existed: transformers fills fields a config lacks with defaults, and so
    does the bound."""
    model = model_of(model_type)
    model.save_pretrained(tmp_path)
    path = tmp_path / "generation_config.json"
    saved = json.loads(path.read_text())
    del saved["max_len_a"], saved["max_len_b"]
    path.write_text(json.dumps(saved))
    reloaded = type(model).from_pretrained(tmp_path)
    assert not hasattr(reloaded.generation_config, "max_len_a")
    expected = [math.floor(DEFAULT_MAX_LEN_A * len(row) + DEFAULT_MAX_LEN_B) for row in SOURCES]  # 16, 8, 12
    assert eos_positions(generate(reloaded)) == expected


@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_folder_without_generation_config_decodes_as_with_the_default_one(model_type, tmp_path, caplog):
    """Not cut at 20 tokens: a folder written by someone else (save_pretrained of the config and weights
    alone, a deleted file) gets a generation config transformers builds from config.json, whose generic
    max_length of 20 cut every translation at 19 tokens. It decodes with the family's defaults, as the folder
    with the default generation config, and one warning line says so."""
    model = model_of(model_type)
    model.save_pretrained(tmp_path / "with")
    model.save_pretrained(tmp_path / "without")
    (tmp_path / "without" / "generation_config.json").unlink()
    rows = [[3 + i % 19 for i in range(25)] + [EOS], SOURCES[1]]  # 26 source tokens: a bound of 38
    with caplog.at_level(logging.WARNING):
        without = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "without")
    warned = [record.getMessage() for record in caplog.records
              if "generation_config.json" in record.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(f"{tmp_path / 'without'} has no generation_config.json")
    caplog.clear()
    with_config = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "with")
    assert not [record for record in caplog.records if "generation_config.json" in record.getMessage()]
    input_ids, attention_mask = source_batch(rows)
    with torch.no_grad():
        expected = with_config.generate(input_ids=input_ids, attention_mask=attention_mask)
        decoded = without.generate(input_ids=input_ids, attention_mask=attention_mask)
    assert decoded.tolist() == expected.tolist()
    assert eos_positions(decoded)[0] == math.floor(DEFAULT_MAX_LEN_A * 26 + DEFAULT_MAX_LEN_B) > 20


@pytest.mark.slow
@pytest.mark.parametrize("model_type", FAMILIES)
def test_off_the_model_decodes_as_transformers_does(model_type):
    """Off, no processor is added: the processors are exactly transformers' own (here with another processor in the
    list, which the bound keeps when on), and so are tokens and scores."""
    model = model_of(model_type)
    input_ids, attention_mask = source_batch()
    kwargs = {"no_repeat_ngram_size": 2, "num_beams": 2}
    lists = {}
    for name, bound in (("off", OFF), ("on", {"max_len_a": 1.0, "max_len_b": 2})):
        config, model_kwargs = model._prepare_generation_config(None, **kwargs, **bound)
        model._prepare_special_tokens(config)  # as generate() does: the </s> id as a tensor
        model_kwargs["attention_mask"] = attention_mask
        lists[name] = [type(p).__name__ for p in model._get_logits_processor(
            config, input_ids_seq_length=1, encoder_input_ids=input_ids, model_kwargs=model_kwargs)]
    transformers_own = super(GenerationLengthDefault, model)._get_logits_processor(
        model._prepare_generation_config(None, **kwargs, **OFF)[0], input_ids_seq_length=1,
        encoder_input_ids=input_ids, model_kwargs={"attention_mask": attention_mask})
    assert lists["off"] == [type(p).__name__ for p in transformers_own] == ["NoRepeatNGramLogitsProcessor"]
    assert lists["on"] == lists["off"] + ["SourceLengthBoundLogitsProcessor"]
    # a bound that no row reaches gives transformers' tokens and scores
    off = generate(model, **kwargs, **OFF, output_scores=True, return_dict_in_generate=True)
    unreached = generate(model, **kwargs, max_len_a=0, max_len_b=100, output_scores=True, return_dict_in_generate=True)
    assert off.sequences.tolist() == unreached.sequences.tolist()
    torch.testing.assert_close(off.sequences_scores, unreached.sequences_scores)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_bound_comes_before_logit_normalization_and_ends_rows_whose_eos_was_removed(model_type):
    model = model_of(model_type)
    out = generate(model, max_len_a=0.5, max_len_b=3, renormalize_logits=True, output_scores=True,
                   return_dict_in_generate=True)
    for step in out.scores:  # every step, the forced ones included, is normalized
        rows = step.isfinite().any(dim=1)
        torch.testing.assert_close(step[rows].logsumexp(dim=-1), torch.zeros(int(rows.sum())))
    # </s> suppressed by another processor: the bound still ends the rows there
    assert eos_positions(generate(model, max_len_a=0.5, max_len_b=3, suppress_tokens=[EOS])) == [7, 4, 6]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_an_explicit_minimum_length_raises_the_bound(model_type):
    """min_new_tokens / min_length are the caller's own: rows may end where they allow </s> and not before (a
    benchmark's min = max new tokens decodes exactly that many)."""
    model = model_of(model_type)
    assert eos_positions(generate(model, max_len_a=0.5, max_len_b=3, min_new_tokens=5)) == [7, 6, 6]
    assert eos_positions(generate(model, max_len_a=0.5, max_len_b=3, min_length=7)) == [7, 7, 7]
    exact = generate(model, max_len_a=0.5, max_len_b=3, min_new_tokens=9, max_new_tokens=9)
    assert exact.shape[1] == 10 and eos_positions(exact) == [None] * len(SOURCES)


def test_source_length_bound_floors_and_keeps_room_for_eos():
    lengths = torch.tensor([1, 10, 20, 7])
    assert source_length_bound(lengths, 1.3, 5).tolist() == [6, 18, 31, 14]  # 1.3 x 10 is 13.000000000000002
    assert source_length_bound(lengths, 0.1, None).tolist() == [1, 1, 2, 1]  # never 0: </s> needs a token
    assert source_length_bound(lengths, None, 4).tolist() == [4, 4, 4, 4]
    assert source_length_bound(torch.tensor([10]), 0.7, 0).tolist() == [7]  # 0.7 x 10 = 6.999999999999999


def test_the_processor_leaves_scores_alone_before_the_first_bound():
    processor = SourceLengthBoundLogitsProcessor(torch.tensor([3, 5]), EOS, prompt_length=1)
    scores = torch.randn(2, VOCAB)
    assert processor(torch.ones(2, 2, dtype=torch.long), scores) is scores  # 1 token generated, bounds 3 and 5
    forced = processor(torch.ones(2, 3, dtype=torch.long), scores)  # row 0 now chooses its 3rd and last token
    assert forced[0].isfinite().nonzero().flatten().tolist() == [EOS] and forced[0, EOS] == scores[0, EOS]
    assert torch.equal(forced[1], scores[1])


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_bound_reads_back_once_per_generate_call_not_per_step(model_type):
    """Rows are forced only from the first row's bound on, read back once (a GPU stalls on each read); before it
    the processor does no work at all."""
    model = random_tiny_model(model_type, syncs.VOCAB, pad_token_id=syncs.PAD, eos_token_id=syncs.EOS,
                              decoder_start_token_id=syncs.START)
    for steps in (6, 12):
        off = syncs.greedy_decode_syncs(model, steps, **OFF).total
        assert syncs.greedy_decode_syncs(model, steps, max_len_a=2.0, max_len_b=1).total == off + 1


@pytest.mark.parametrize(("bound", "message"), [
    ({"max_len_a": -1.0}, r"max_len_a \(output tokens per source token\) must be a number >= 0.*got -1.0"),
    ({"max_len_a": "1.3"}, r"max_len_a .* must be a number >= 0.*got '1.3'"),
    ({"max_len_a": float("nan")}, r"max_len_a .* must be a number >= 0.*got nan"),
    ({"max_len_a": True}, r"max_len_a .* must be a number >= 0.*got True"),
    ({"max_len_b": -2}, r"max_len_b .* must be a whole number >= 0.*got -2"),
    ({"max_len_b": 2.5}, r"max_len_b .* must be a whole number >= 0.*got 2.5"),
    ({"max_len_a": 0, "max_len_b": 0}, r"max_len_a=0 with max_len_b=0 bounds every output to 0 tokens"),
    ({"max_len_a": 1e18}, r"max_len_a must be <= 100 \(output tokens per source token\), got 1e\+18"),
    ({"max_len_b": 10**20}, r"max_len_b must be <= 100000 \(tokens added to the bound\)"),
])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_bad_values_are_refused_before_decoding(model_type, bound, message):
    model = model_of(model_type)
    encoder_calls = []
    model.get_encoder().register_forward_pre_hook(lambda module, args: encoder_calls.append(1))
    with pytest.raises(ValueError, match=message):
        generate(model, **bound)
    model.generation_config.max_len_a = bound.get("max_len_a", DEFAULT_MAX_LEN_A)  # the same from the config
    model.generation_config.max_len_b = bound.get("max_len_b", DEFAULT_MAX_LEN_B)
    with pytest.raises(ValueError, match=message):
        generate(model)
    assert encoder_calls == []


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_without_attention_mask_the_source_length_is_input_ids_not_pad(model_type, num_beams):
    model = model_of(model_type)
    input_ids, _ = source_batch()
    with torch.no_grad():
        sequences = model.generate(input_ids=input_ids, num_beams=num_beams, max_length=40, max_len_a=0.5, max_len_b=3)
    assert eos_positions(sequences) == [7, 4, 6]


# --- The translate command: flags over the folder's generation config ----------------------------------------------

def translate_lines(model_dir, capsys, *flags):
    from hf_s2s.cli import translate as translate_command  # the command line's own code, run in this process

    assert translate_command.main([str(model_dir), "--input", str(model_dir / "input.txt"), *flags]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.slow
def test_translate_command_flags_change_or_turn_off_the_folders_bound(tmp_path, capsys):
    from hf_s2s.inference.translate import translate
    from hf_s2s.models.loading import load_model, load_tokenizer
    from tests.saved_folders import save_tiny_model_folder

    model_dir = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", seed=3)
    sentences = ["a b c d e f g h", "e f", "g h i j"]
    (model_dir / "input.txt").write_text("".join(f"{s}\n" for s in sentences))
    model, tokenizer = load_model(model_dir), load_tokenizer(model_dir)

    def texts(**bound):
        return [h[0].text for h in translate(model, tokenizer, sentences, max_new_tokens=30, **bound)]

    by_default = translate_lines(model_dir, capsys, "--max-new-tokens", "30")
    assert by_default == texts() == texts(max_len_a=DEFAULT_MAX_LEN_A, max_len_b=DEFAULT_MAX_LEN_B)
    off = translate_lines(model_dir, capsys, "--max-new-tokens", "30", "--no-length-bound")
    assert off == texts(max_len_a=None, max_len_b=None) != by_default
    short = translate_lines(model_dir, capsys, "--max-new-tokens", "30", "--max-len-a", "0", "--max-len-b", "3")
    assert short == texts(max_len_a=0, max_len_b=3)
    # 2 tokens and </s>: the first 2 characters of the unbounded output (each token of this model is one character)
    assert [len(text) for text in short] == [2, 2, 2] and all(o.startswith(t) for o, t in zip(off, short, strict=True))
    # one flag keeps the folder's other value: a = 0.5 with the folder's b = 5
    assert translate_lines(model_dir, capsys, "--max-new-tokens", "30", "--max-len-a", "0.5") == \
        texts(max_len_a=0.5, max_len_b=DEFAULT_MAX_LEN_B)


@pytest.mark.parametrize(("flags", "message"), [
    (["--max-len-a", "-1"], "error: --max-len-a/--max-len-b: max_len_a (output tokens per source token) must be a "
                            "number >= 0"),
    (["--max-len-a", "x"], "argument --max-len-a: invalid float value: 'x'"),
    (["--max-len-b", "2.5"], "argument --max-len-b: invalid int value: '2.5'"),
    (["--max-len-b", "-3"], "error: --max-len-a/--max-len-b: max_len_b (output tokens added to max_len_a x source "
                            "tokens) must be a whole number >= 0"),
    (["--no-length-bound", "--max-len-b", "3"],
     "error: --no-length-bound turns the length bound off; it cannot be combined with --max-len-b"),
])
def test_translate_command_refuses_bad_bound_flags_before_loading(tmp_path, capsys, flags, message):
    from hf_s2s.cli import translate as translate_command

    with pytest.raises(SystemExit) as stopped:  # the folder does not exist: the refusal comes first
        translate_command.main([str(tmp_path / "not_loaded"), *flags])
    assert stopped.value.code != 0
    error = capsys.readouterr().err + str(stopped.value.code)
    assert message in error and "not_loaded" not in error


# --- The training job: its flags set the bound of validation, test decoding and the saved folder --------------------

@pytest.mark.slow
def test_training_job_flags_set_the_bound_its_results_and_folder_record(tmp_path):
    from hf_s2s.models.loading import load_model
    from hf_s2s.training.run import run

    output_dir = tmp_path / "run"
    results = run(*tiny_args(output_dir, "transformer_seq2seq", "--max_len_a", "0.5", "--max_len_b", "2",
                             "--test_num_beams", "1", "--num_train_epochs", "1"))
    decoding = results["test"]["greedy"]["decoding"]
    assert (decoding["max_len_a"], decoding["max_len_b"]) == (0.5, 2)
    saved = json.loads((output_dir / "model" / "generation_config.json").read_text())
    assert (saved["max_len_a"], saved["max_len_b"]) == (0.5, 2)
    config = load_model(output_dir / "model").generation_config
    assert (config.max_len_a, config.max_len_b) == (0.5, 2)


@pytest.mark.parametrize(("flags", "message"), [
    (["--max_len_a", "-0.5"], r"--max_len_a/--max_len_b: max_len_a .* must be a number >= 0"),
    (["--no_length_bound", "true", "--max_len_a", "2"],
     r"--no_length_bound turns the length bound off; it cannot be combined with --max_len_a"),
    (["--model_name_or_path", "MARIAN", "--max_len_b", "3"],
     r"--max_len_a / --max_len_b / --no_length_bound set the length bound of .* a marian model has none"),
])
def test_training_job_refuses_bad_bound_flags_before_anything_is_written(tmp_path, flags, message):
    from transformers import MarianConfig

    from hf_s2s.training.run import run

    MarianConfig(vocab_size=VOCAB, d_model=8, decoder_start_token_id=START).save_pretrained(tmp_path / "marian")
    flags = [str(tmp_path / "marian") if flag == "MARIAN" else flag for flag in flags]
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=message):
        run(*tiny_args(out, "transformer_seq2seq", *flags))
    assert not out.exists()
