"""Forced decoding (hf_s2s.inference.forced, hf-s2s score): the log-probabilities a model gives translations it is
handed, read under teacher forcing, are its own forward pass's, whatever the batch; the hypotheses of an n-best list
read so are the translations translate() returns, with the attention generate() produced them with; bad input is
refused by name. Both families, on random tiny models."""

import contextlib
import io

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hf_s2s  # noqa: F401
from hf_s2s.cli import run_command
from hf_s2s.inference.attention import eager_attention
from hf_s2s.inference.engines import load_engine
from hf_s2s.inference.ensemble import Seq2SeqEnsemble
from hf_s2s.inference.forced import force_decode, hypothesis_ids
from tests.saved_folders import save_tiny_model_folder

FAMILIES = ["transformer_seq2seq", "rnn_seq2seq"]
SOURCES = ["a b c d", "e f", "g h i j a b", "c"]
TARGETS = ["d c b a", "f e", "b a j i h g", "c c c"]


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    base = tmp_path_factory.mktemp("forced")
    return {family: load_engine(save_tiny_model_folder(base / family, family, seed=3, encoder_layers=2,
                                                       decoder_layers=2), threads=1)
            for family in FAMILIES}


def own_forward(model, tokenizer, source: str, target: str) -> torch.Tensor:
    """The model's own forward pass with ``labels`` (the training path: it shifts the labels right itself): the
    log-probability of each label, (T,)."""
    batch = tokenizer([source], text_target=[target], return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       labels=batch["labels"]).logits
    return logits.log_softmax(dim=-1)[0].gather(1, batch["labels"][0][:, None])[:, 0]


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_equals_single_equals_the_models_own_forward_pass(engines, family):
    engine = engines[family]
    model, tokenizer = engine.model, engine.tokenizer
    batched = force_decode(model, tokenizer, SOURCES, TARGETS, batch_size=3, output_attentions=True)
    for index, (source, target) in enumerate(zip(SOURCES, TARGETS, strict=True)):
        alone = force_decode(model, tokenizer, [source], [target], output_attentions=True)[0]
        own = own_forward(model, tokenizer, source, target)
        pair = batched[index]
        assert pair.target_tokens == alone.target_tokens == tokenizer.convert_ids_to_tokens(
            tokenizer(text_target=target)["input_ids"])
        assert pair.source_tokens == tokenizer.tokenize(source) + ["</s>"]
        torch.testing.assert_close(torch.tensor(pair.token_log_probs), own, rtol=0, atol=1e-5)
        torch.testing.assert_close(torch.tensor(alone.token_log_probs), own, rtol=0, atol=1e-5)
        assert pair.score == pytest.approx(float(own.sum()), abs=1e-4)
        torch.testing.assert_close(pair.cross_attentions, alone.cross_attentions, rtol=0, atol=1e-5)
        if family == "transformer_seq2seq":
            torch.testing.assert_close(pair.encoder_attentions, alone.encoder_attentions, rtol=0, atol=1e-5)
            assert pair.encoder_attentions.shape == (2, 2, len(pair.source_ids), len(pair.source_ids))
        else:
            assert pair.encoder_attentions is None
        assert torch.allclose(pair.cross_attentions.sum(dim=-1), torch.ones(()), atol=1e-5)


def generated(engine, sentence: str, num_beams: int, n: int):
    """generate(output_attentions=True) of ``sentence`` alone with the engine's options: each returned sequence, the
    cross-attention of each of its steps along its beam (layers, heads, T, S), and (greedy) each token's
    log-probability under the model's own distribution (the raw logits: generate's scores are those after its
    processors, which give a </s> forced at the length bound probability 1)."""
    options = engine.options(num_beams=num_beams, num_return_sequences=n)
    batch = engine.tokenizer([sentence], return_tensors="pt")
    with eager_attention([engine.model]), torch.no_grad():
        output = engine.model.generate(**batch, **options.decoding_kwargs(), output_attentions=True,
                                       output_logits=True, return_dict_in_generate=True)
    found = []
    config = engine.model.config
    for k, ids in enumerate(hypothesis_ids(output.sequences, config.pad_token_id, config.eos_token_id)):
        steps = []
        for step in range(len(ids)):
            row = k if num_beams == 1 else int(output.beam_indices[k, step])
            steps.append(torch.stack([layer[row, :, -1] for layer in output.cross_attentions[step]]))
        scores = None
        if num_beams == 1:
            scores = torch.stack([output.logits[step][k].log_softmax(-1)[ids[step]] for step in range(len(ids))])
        found.append((ids, torch.stack(steps, dim=2), scores))
    return found


@pytest.mark.parametrize(("num_beams", "n"), [(1, 1), (3, 3)])
@pytest.mark.parametrize("family", FAMILIES)
def test_each_hypothesis_is_the_translation_with_the_attention_and_scores_generate_gave_it(engines, family,
                                                                                           num_beams, n):
    engine = engines[family]
    options = engine.options(num_beams=num_beams, num_return_sequences=n)
    sentences = [*SOURCES[:3], " "]
    forced = engine.force_hypotheses(sentences, options, batch_size=2)
    translated = engine.translate(sentences, options, scores=True)
    assert forced[-1] == [] and [h.text for h in translated[-1]] == [""] * n  # a blank line is not decoded
    for sentence, hypotheses, texts in zip(sentences[:-1], forced, translated, strict=False):
        assert [engine.tokenizer.decode(h.target_ids, skip_special_tokens=True) for h in hypotheses] == \
            [t.text for t in texts]
        for hypothesis, (ids, cross, scores) in zip(hypotheses, generated(engine, sentence, num_beams, n),
                                                    strict=True):
            assert hypothesis.target_ids == ids
            torch.testing.assert_close(hypothesis.cross_attentions, cross, rtol=0, atol=1e-5)
            if scores is not None:  # greedy: the step's distribution is the forced pass's
                torch.testing.assert_close(torch.tensor(hypothesis.token_log_probs), scores, rtol=0, atol=1e-5)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text("abcdefghij ", max_size=14), st.text("abcdefghij ", max_size=14)),
                min_size=1, max_size=5), st.integers(1, 4))
def test_any_pairs_any_batch_size_read_as_alone(engines, pairs, batch_size):
    engine = engines["transformer_seq2seq"]
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    batched = force_decode(engine.model, engine.tokenizer, sources, targets, batch_size=batch_size)
    for index, pair in enumerate(batched):
        alone = force_decode(engine.model, engine.tokenizer, [sources[index]], [targets[index]])[0]
        assert pair.target_ids == alone.target_ids and pair.target_ids[-1] == engine.tokenizer.eos_token_id
        torch.testing.assert_close(torch.tensor(pair.token_log_probs), torch.tensor(alone.token_log_probs),
                                   rtol=0, atol=1e-5)


def test_bad_input_is_refused_by_name(engines, tmp_path):
    engine = engines["transformer_seq2seq"]
    model, tokenizer = engine.model, engine.tokenizer
    with pytest.raises(ValueError, match="got 2 sources and 1 targets"):
        force_decode(model, tokenizer, ["a", "b"], ["a"])
    with pytest.raises(ValueError, match=r"target 1 \(counted from 1\) has no tokens"):
        force_decode(model, tokenizer, ["a"], [[]])
    with pytest.raises(ValueError, match="outside the target vocabulary"):
        force_decode(model, tokenizer, ["a"], [[5, len(tokenizer) + 3]])
    with pytest.raises(ValueError, match="batch_size"):
        force_decode(model, tokenizer, ["a"], ["a"], batch_size=0)
    with pytest.raises(ValueError, match="forced decoding reads one model"):
        force_decode(Seq2SeqEnsemble([model, model]), tokenizer, ["a"], ["a"])
    plain = load_engine(save_tiny_model_folder(tmp_path / "plain", "rnn_seq2seq", attention_type="none"), threads=1)
    with pytest.raises(ValueError, match="no attention over the source"):
        force_decode(plain.model, plain.tokenizer, ["a"], ["a"], output_attentions=True)
    assert force_decode(plain.model, plain.tokenizer, ["a"], ["a"])[0].cross_attentions is None  # scores it reads


def score_command(*arguments: str) -> list[str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert run_command("score", list(arguments)) == 0
    return printed.getvalue().splitlines()


def test_the_score_command_prints_marian_scorers_lines_equal_to_forced_decoding(engines, tmp_path):
    engine = engines["rnn_seq2seq"]
    (tmp_path / "src").write_text("\n".join(SOURCES) + "\n")
    (tmp_path / "tgt").write_text("\n".join(TARGETS) + "\n")
    folder = engine.folder
    expected = force_decode(engine.model, engine.tokenizer, SOURCES, TARGETS)
    plain = score_command(folder, "--input", str(tmp_path / "src"), "--target", str(tmp_path / "tgt"),
                          "--batch-size", "3")
    assert all(len(line.split(".")[1]) == 6 for line in plain)  # marian-scorer's 6 decimals
    assert [float(line) for line in plain] == pytest.approx([pair.score for pair in expected], abs=1e-4)
    worded = score_command(folder, "--input", str(tmp_path / "src"), "--target", str(tmp_path / "tgt"),
                           "--normalize", "--word-scores")
    for line, pair in zip(worded, expected, strict=True):
        score, words = line.split(" ||| WordScores= ")
        assert float(score) == pytest.approx(pair.score / len(pair.target_ids), abs=1e-6)
        assert [float(value) for value in words.split()] == pytest.approx(pair.token_log_probs, abs=1e-6)


@pytest.mark.parametrize(("arguments", "message"), [
    (["--target", "{missing}"], "--target {missing} does not exist (or is not a file)"),
    (["--target", "{short}"], "--target {short} has 1 lines but the input ({src}) has 4"),
    (["--target", "{tgt}", "--layer", "1"], "--layer and --head choose the map --alignments writes"),
    (["--target", "{tgt}", "--alignments", "csv"], "--alignments csv writes a file: name it with --alignments-output"),
    (["--target", "{tgt}", "--alignments", "pharaoh", "--head", "9"], "head 9 is out of range"),
    (["--target", "{tgt}", "--batch-size", "0"], "batch_size (--batch-size) must be a whole number >= 1"),
])
def test_the_score_command_refuses_in_one_line(engines, tmp_path, capsys, arguments, message):
    paths = {"src": tmp_path / "src", "tgt": tmp_path / "tgt", "short": tmp_path / "short",
             "missing": tmp_path / "missing"}
    paths["src"].write_text("\n".join(SOURCES) + "\n")
    paths["tgt"].write_text("\n".join(TARGETS) + "\n")
    paths["short"].write_text("a\n")
    with pytest.raises(SystemExit) as exit_:
        run_command("score", [engines["transformer_seq2seq"].folder, "--input", str(paths["src"]),
                              *[argument.format(**paths) for argument in arguments]])
    assert str(exit_.value) == f"error: {message.format(**paths)}" or message.format(**paths) in str(exit_.value)
    assert str(exit_.value).startswith("error: ")
