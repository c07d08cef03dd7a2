"""Attention maps (hf_s2s.inference.attention_maps): a view is the layer and head asked for; words are the
whitespace words of the text, whatever its pieces (subwords, byte fallback); a word-level map keeps its rows summing to
1 and the attention a word received; the hard alignment is each row's argmax, written as OpenNMT-py and Marian write
Pharaoh pairs; ``hf-s2s translate --alignments`` writes what the maps hold, in every format."""

import contextlib
import csv
import io
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hf_s2s  # noqa: F401
from hf_s2s.cli import run_command
from hf_s2s.inference.attention_maps import (
    AlignmentWriter,
    attention_map,
    check_view,
    coverage,
    entropy,
    hard_alignment,
    merge_words,
    pharaoh,
    word_ids,
)
from hf_s2s.inference.engines import load_engine
from hf_s2s.inference.forced import force_decode
from tests.saved_folders import save_tiny_model_folder

WORDS = st.lists(st.text("abcdefghijü", min_size=1, max_size=5), min_size=1, max_size=6)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = save_tiny_model_folder(tmp_path_factory.mktemp("maps") / "tf", "transformer_seq2seq", seed=3,
                                    encoder_layers=2, decoder_layers=2)
    return load_engine(folder, threads=1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(WORDS)
def test_word_ids_are_the_texts_whitespace_words_whatever_the_pieces(engine, words):
    tokenizer = engine.tokenizer
    ids = tokenizer(" ".join(words))["input_ids"]  # ends with </s>
    found = word_ids(tokenizer, ids)
    assert found[-1] is None and found[:-1] == sorted(found[:-1])  # </s> is no word; pieces in order
    assert sorted(set(found[:-1])) == list(range(len(words)))
    for index, word in enumerate(words):
        pieces = [token for token, w in zip(ids, found, strict=True) if w == index]
        assert tokenizer.decode(pieces).strip() == word


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(WORDS, WORDS, st.sampled_from([None, 0, 1]), st.sampled_from([None, 0, 1]))
def test_a_word_level_map_keeps_rows_summing_to_one_and_each_words_attention(engine, source, target, layer, head):
    pair = force_decode(engine.model, engine.tokenizer, [" ".join(source)], [" ".join(target)],
                        output_attentions=True)[0]
    tokens = attention_map(pair, engine.tokenizer, layer=layer, head=head)
    words = attention_map(pair, engine.tokenizer, layer=layer, head=head, word_level=True)
    chosen = pair.cross_attentions[-1 if layer is None else layer]
    torch.testing.assert_close(tokens.weights, chosen.mean(dim=0) if head is None else chosen[head])
    assert words.rows == [*target, "</s>"] and words.columns == [*source, "</s>"]
    assert words.row_special == [False] * len(target) + [True]
    torch.testing.assert_close(words.weights.sum(dim=1), torch.ones(len(words.rows)), rtol=0, atol=1e-5)
    target_words = word_ids(engine.tokenizer, pair.target_ids)
    source_words = word_ids(engine.tokenizer, pair.source_ids)
    for w in range(len(target)):  # a target word's row is the mean of its pieces' rows, summed over source words
        pieces = [t for t, word in enumerate(target_words) if word == w]
        for v in range(len(source)):
            columns = [s for s, word in enumerate(source_words) if word == v]
            assert float(words.weights[w, v]) == pytest.approx(
                float(tokens.weights[pieces][:, columns].sum(dim=1).mean()), abs=1e-6)
    assert sum(words.row_log_probs) == pytest.approx(pair.score, abs=1e-4)  # a word's log-probability: its pieces'


def test_merging_sums_columns_and_averages_rows():
    weights = torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25], [0.0, 1.0, 0.0]])
    merged = merge_words(weights, [[0, 1], [2]], [[0], [1, 2]])
    torch.testing.assert_close(merged, torch.tensor([[0.3, 0.7], [0.0, 1.0]]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(WORDS, WORDS, st.booleans())
def test_the_hard_alignment_is_each_rows_argmax_without_end_of_sentence(engine, source, target, word_level):
    pair = force_decode(engine.model, engine.tokenizer, [" ".join(source)], [" ".join(target)],
                        output_attentions=True)[0]
    found = attention_map(pair, engine.tokenizer, word_level=word_level)
    pairs = hard_alignment(found)
    real_columns = [c for c, special in enumerate(found.column_special) if not special]
    assert [row for _, row in sorted(pairs, key=lambda p: p[1])] == \
        [r for r, special in enumerate(found.row_special) if not special]  # one pair per row but </s>
    for column, row in pairs:
        assert column in real_columns
        assert found.weights[row, column] == found.weights[row, real_columns].max()
    assert pairs == sorted(pairs)  # source index first, then target, as OpenNMT-py and Marian sort them
    assert pharaoh(pairs) == " ".join(f"{s}-{t}" for s, t in pairs)
    assert coverage(found) == pytest.approx(found.weights.sum(dim=0).tolist())
    assert all(0 <= h <= torch.log(torch.tensor(float(len(found.columns)))) + 1e-6 for h in entropy(found))


def test_a_view_the_model_lacks_is_refused_from_its_config(engine, tmp_path):
    config = engine.config
    check_view(config, "encoder", 1, 1)
    with pytest.raises(ValueError, match="layer 2 is out of range: the cross attention has 2 layers, numbered 0 to 1"):
        check_view(config, "cross", 2)
    with pytest.raises(ValueError, match="head 2 is out of range: the encoder attention has 2 heads per layer"):
        check_view(config, "encoder", None, 2)
    with pytest.raises(ValueError, match="kind 'decoder' is not an attention kind; choose one of cross, encoder"):
        check_view(config, "decoder")
    rnn = load_engine(save_tiny_model_folder(tmp_path / "rnn", "rnn_seq2seq"), threads=1)
    with pytest.raises(ValueError, match="has no encoder self-attention"):
        check_view(rnn.config, "encoder")
    check_view(rnn.config, "cross", 0, 0)


def translate_command(folder, source, *arguments) -> list[str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run_command("translate", [str(folder), "--input", str(source), *arguments]) == 0
    return printed.getvalue().splitlines()


def test_translate_alignments_are_the_maps_of_its_translations_in_every_format(engine, tmp_path):
    sentences = ["a b c d", "", "e f g h i", "j"]
    source = tmp_path / "source.txt"
    source.write_text("\n".join(sentences) + "\n")
    plain = translate_command(engine.folder, source, "--beams", "3", "--nbest", "2", "--scores")
    options = engine.options(num_beams=3, num_return_sequences=2)
    forced = engine.force_hypotheses(sentences, options)
    maps = [[attention_map(h, engine.tokenizer, layer=0, head=1) for h in hypotheses] for hypotheses in forced]
    lined = translate_command(engine.folder, source, "--beams", "3", "--nbest", "2", "--scores", "--alignments",
                              "pharaoh", "--layer", "0", "--head", "1")
    assert [line.split(" ||| ")[0] for line in lined] == plain  # the lines as before, then the alignment
    expected = [pharaoh(hard_alignment(found)) for hypotheses in maps for found in hypotheses or [None, None]
                if found is not None]
    assert [line.split(" ||| ")[1] for line in lined if not line.split("\t")[1] == ""] == expected
    assert all(line.endswith(" ||| ") for line in lined if line.split("\t")[1] == "")  # a blank line: no alignment
    written = tmp_path / "align.jsonl"
    translate_command(engine.folder, source, "--beams", "3", "--nbest", "2", "--alignments", "json",
                      "--alignments-output", str(written), "--layer", "0", "--head", "1")
    records = [json.loads(line) for line in written.read_text().splitlines()]
    assert [r.get("blank", False) for r in records] == [False, False, True, True, False, False, False, False]
    for record in (r for r in records if not r.get("blank")):
        found = maps[record["sentence"] - 1][record["hypothesis"]]
        assert record["weights"] == found.weights.tolist() and record["rows"] == found.rows
        assert (record["layer"], record["head"], record["alignment"]) == (0, 1, pharaoh(hard_alignment(found)))
    table = tmp_path / "align.csv"
    translate_command(engine.folder, source, "--alignments", "csv", "--alignments-output", str(table), "--word-level")
    rows = list(csv.reader(table.read_text().splitlines()))
    assert rows[0] == ["sentence", "hypothesis", "target_index", "target", "source_index", "source", "weight"]
    first = attention_map(engine.force_hypotheses(sentences[:1], engine.options())[0][0], engine.tokenizer,
                          word_level=True)
    cells = [row for row in rows[1:] if row[0] == "1"]
    assert len(cells) == len(first.rows) * len(first.columns)
    assert [float(row[6]) for row in cells] == pytest.approx(first.weights.flatten().tolist(), abs=1e-5)
    assert {row[5] for row in cells} == {"a", "b", "c", "d", "</s>"}


@pytest.mark.parametrize(("arguments", "message"), [
    (["--alignments", "json"], "--alignments json writes a file: name it with --alignments-output"),
    (["--word-level"], "--alignments-output and --word-level go with --alignments FORMAT"),
    (["--alignments", "pharaoh", "--layer", "5"], "layer 5 is out of range"),
    (["--alignments", "pharaoh", "--coverage-penalty", "0.2"], "leave out --coverage-penalty"),
    (["--alignments", "json", "--alignments-output", "{exists}"], "{exists} exists; pass --overwrite to replace it"),
    (["--layer", "0"], "--layer and --head choose what --plot-encoder-attention draws or --alignments writes"),
])
def test_translate_refuses_alignment_flags_it_cannot_honour_in_one_line(engine, tmp_path, arguments, message):
    source = tmp_path / "source.txt"
    source.write_text("a b\n")
    exists = tmp_path / "exists.jsonl"
    exists.write_text("mine\n")
    with pytest.raises(SystemExit) as exit_:
        run_command("translate", [engine.folder, "--input", str(source),
                                  *[argument.format(exists=exists) for argument in arguments]])
    assert str(exit_.value).startswith("error: ") and message.format(exists=exists) in str(exit_.value)
    assert exists.read_text() == "mine\n"


def test_an_alignment_writer_refuses_a_format_it_does_not_know():
    with pytest.raises(ValueError, match="--alignments 'xml': choose one of pharaoh, soft, json, csv"):
        AlignmentWriter("xml")
