"""The decoding engines (hf_s2s.inference.engines) and the CTranslate2 sentence translation under them
(hf_s2s.inference.ctranslate2.translate_ctranslate2), and `hf-s2s translate --engine ctranslate2`.

The CTranslate2 engine gives the torch engine's greedy translations, with the source-relative length bound too
(which CTranslate2 itself lacks), and neither engine's translation of a sentence depends on the sentences decoded
beside it: what lets the server batch requests together."""

import pytest
import torch

from hf_s2s.cli import run_command
from hf_s2s.inference.engines import TorchEngine, load_engine
from tests.helpers import single_thread
from tests.saved_folders import TEXTS, save_tiny_model_folder

SENTENCES = TEXTS[:24] + ["", "a"]
BOUNDS = {"the generation config's": {}, "a tight one": {"max_len_a": 0.5, "max_len_b": 2},
          "none": {"no_length_bound": True}}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("engines")
    return {model_type: save_tiny_model_folder(base / model_type, model_type)
            for model_type in ("transformer_seq2seq", "rnn_seq2seq")}


@pytest.fixture(scope="module")
def torch_engine(folders):
    return load_engine(folders["transformer_seq2seq"], "torch")


@pytest.fixture(scope="module")
def ct2_engine(folders):
    pytest.importorskip("ctranslate2")
    return load_engine(folders["transformer_seq2seq"], "ctranslate2", threads=1)


def texts(results):
    return [[hypothesis.text for hypothesis in hypotheses] for hypotheses in results]


def scores(results):
    return [hypothesis.score for hypotheses in results for hypothesis in hypotheses]


@pytest.mark.parametrize("bound", list(BOUNDS))
def test_ctranslate2_engine_greedy_gives_the_torch_engines_translations(torch_engine, ct2_engine, bound):
    options = torch_engine.options(num_beams=1, **BOUNDS[bound])
    assert ct2_engine.options(num_beams=1, **BOUNDS[bound]) == options
    with single_thread():
        expected = torch_engine.translate(SENTENCES, options, batch_size=8, scores=True)
        got = ct2_engine.translate(SENTENCES, options, batch_size=8, scores=True)
    assert texts(got) == texts(expected)
    assert len({text for text, in texts(expected)}) > 5  # varied outputs: the comparison has teeth
    assert scores(got) == pytest.approx(scores(expected), abs=2e-3)


@pytest.mark.parametrize("engine_name", ["torch_engine", "ct2_engine"])
@pytest.mark.parametrize("beams,nbest", [(1, 1), (3, 2)])
def test_a_sentences_translation_does_not_depend_on_its_batch(engine_name, beams, nbest, request):
    engine = request.getfixturevalue(engine_name)
    options = engine.options(num_beams=beams, num_return_sequences=nbest, max_len_a=0.5, max_len_b=3)
    with single_thread():
        together = engine.translate(SENTENCES, options, batch_size=len(SENTENCES), scores=True)
        alone = [engine.translate([sentence], options, scores=True)[0] for sentence in SENTENCES]
    assert texts(together) == texts(alone)
    assert scores(together) == pytest.approx(scores(alone), abs=1e-5)


def test_options_are_completed_from_the_generation_config_and_impossible_ones_refused(torch_engine):
    generation_config = torch_engine.generation_config
    options = torch_engine.options()
    assert options.num_beams == (generation_config.num_beams or 1)
    assert (options.max_len_a, options.max_len_b) == (generation_config.max_len_a, generation_config.max_len_b)
    assert torch_engine.options(max_len_b=7).max_len_a == generation_config.max_len_a
    assert torch_engine.options(no_length_bound=True).max_len_a is None
    for wrong, named in [({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences"),
                         ({"num_beams": 0}, "num_beams"), ({"max_len_a": 0, "max_len_b": 0}, "0 tokens"),
                         ({"no_length_bound": True, "max_len_b": 3}, "no_length_bound")]:
        with pytest.raises(ValueError, match=named):
            torch_engine.options(**wrong)


def test_torch_engine_decodes_bfloat16_and_int8_weights(folders):
    for kind, engine in (("bfloat16", load_engine(folders["rnn_seq2seq"], dtype="bfloat16")),
                         ("int8", load_engine(folders["rnn_seq2seq"], int8=True))):
        assert engine.weights == kind and engine.describe()["weights"] == kind
        results = engine.translate(SENTENCES[:3], engine.options(num_beams=2), scores=True)
        assert len(results) == 3 and all(isinstance(h[0].score, float) for h in results)
    assert next(load_engine(folders["rnn_seq2seq"], dtype="bfloat16").model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="--int8.*bfloat16"):
        TorchEngine(folders["rnn_seq2seq"], dtype="bfloat16", int8=True)
    with pytest.raises(ValueError, match="must be one of torch, ctranslate2"):
        load_engine(folders["rnn_seq2seq"], "onnx")


def test_ctranslate2_engine_refuses_the_rnn_family_before_loading_its_weights(folders, tmp_path):
    pytest.importorskip("ctranslate2")
    rnn = tmp_path / "rnn"
    rnn.mkdir()
    for path in folders["rnn_seq2seq"].iterdir():  # everything but the weights
        if path.name != "model.safetensors":
            (rnn / path.name).write_bytes(path.read_bytes())
    with pytest.raises(ValueError, match="Transformer family only.*rnn_seq2seq.*--engine torch"):
        load_engine(rnn, "ctranslate2")
    with pytest.raises(ValueError, match="float32 or int8"):
        load_engine(folders["transformer_seq2seq"], "ctranslate2", dtype="bfloat16")


def test_ctranslate2_engine_gives_no_alignments_and_torch_one_per_target_token(torch_engine, ct2_engine):
    with pytest.raises(ValueError, match="--engine torch"):
        ct2_engine.check_alignment()
    alignment = torch_engine.alignment("a b c", torch_engine.options(num_beams=1))
    assert alignment.source_tokens[-1] == "</s>" and len(alignment.weights) == len(alignment.target_tokens)
    assert all(sum(row) == pytest.approx(1, abs=1e-4) for row in alignment.weights)


def test_translate_command_with_the_ctranslate2_engine(folders, ct2_engine, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES[:6]) + "\n")
    folder = str(folders["transformer_seq2seq"])
    assert run_command("translate", [folder, "--input", str(source), "--engine", "ctranslate2", "--beams", "3",
                                     "--nbest", "2", "--scores"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = ct2_engine.translate(SENTENCES[:6], ct2_engine.options(num_beams=3, num_return_sequences=2),
                                    scores=True)
    assert lines == [f"{index}\t{h.text}\t{h.score:.4f}" for index, hypotheses in enumerate(expected)
                     for h in hypotheses]
    for arguments, named in [([folder, folder], "an ensemble"), ([folder, "--coverage-penalty", "0.1", "--beams", "2"],
                                                                 "--coverage-penalty"),
                             ([str(folders["rnn_seq2seq"])], "Transformer family only")]:
        with pytest.raises(SystemExit) as exit_info:
            run_command("translate", [*arguments, "--input", str(source), "--engine", "ctranslate2"])
        assert str(exit_info.value.code).startswith("error: ") and named in str(exit_info.value.code)
