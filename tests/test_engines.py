"""The decoding engines (hf_s2s.inference.engines): one registry that every path picks its engine from by name, and
one suite that runs every engine (torch in float32, bfloat16 and int8, ctranslate2, onnx; both families where the
engine runs them) through the same cases against generate().

The CTranslate2 and ONNX engines give the torch engine's greedy translations, with the source-relative length bound
too (which CTranslate2 itself lacks), and no float32 engine's translation of a sentence depends on the sentences
decoded beside it: what lets the server batch requests together."""

import importlib.util
import json
import logging
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from hf_s2s.benchmark.serving import CONFIGURATIONS
from hf_s2s.cli import run_command
from hf_s2s.cli import serve as serve_command
from hf_s2s.cli import translate as translate_command
from hf_s2s.inference.decoding import DecodingOptions
from hf_s2s.inference.engine_choice import AUTO, FASTEST_FIRST, open_fastest_engine
from hf_s2s.inference.engines import ENGINES, load_engine, open_engine
from hf_s2s.inference.int8 import quantize_int8
from hf_s2s.inference.translate import translate
from hf_s2s.models.loading import load_model, load_tokenizer
from tests.helpers import single_thread
from tests.saved_folders import TEXTS, save_tiny_model_folder

ONNX = all(importlib.util.find_spec(name) for name in ("onnx", "onnxruntime", "onnxscript"))
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


@pytest.fixture(scope="module")
def onnx_engine(folders):
    """The onnx engine on a model folder: exported into a temporary folder when it loads."""
    if not ONNX:
        pytest.skip("onnx, onnxruntime and onnxscript are needed")
    return load_engine(folders["transformer_seq2seq"], "onnx", threads=1)


def texts(results):
    return [[hypothesis.text for hypothesis in hypotheses] for hypotheses in results]


def scores(results):
    return [hypothesis.score for hypotheses in results for hypothesis in hypotheses]


@pytest.mark.parametrize("bound", list(BOUNDS))
@pytest.mark.parametrize("engine_name", ["ct2_engine", "onnx_engine"])
def test_greedy_search_gives_the_torch_engines_translations_and_scores(torch_engine, engine_name, bound, request):
    engine = request.getfixturevalue(engine_name)
    options = torch_engine.options(num_beams=1, **BOUNDS[bound])
    assert engine.options(num_beams=1, **BOUNDS[bound]) == options
    with single_thread():
        expected = torch_engine.translate(SENTENCES, options, batch_size=8, scores=True)
        got = engine.translate(SENTENCES, options, batch_size=8, scores=True)
    assert texts(got) == texts(expected)
    assert len({text for text, in texts(expected)}) > 5  # varied outputs: the comparison has teeth
    assert scores(got) == pytest.approx(scores(expected), abs=2e-3)


class CountedTranslator:
    """A ctranslate2.Translator that counts the source rows of its translate_batch calls."""

    def __init__(self, translator):
        self.translator, self.rows = translator, 0

    def translate_batch(self, source, **kwargs):
        self.rows += len(source)
        return self.translator.translate_batch(source, **kwargs)


@pytest.mark.parametrize("bound", list(BOUNDS))
def test_the_ctranslate2_engine_decodes_each_greedy_row_once_also_at_its_length_bound(torch_engine, ct2_engine,
                                                                                      monkeypatch, bound):
    """A row that reaches its own bound (a random model ends no sentence, so every row here does under a bound) is
    stopped there, in the one call that decodes its batch, not decoded again; its tokens and score are torch's."""
    counted = CountedTranslator(ct2_engine.translator)
    monkeypatch.setattr(ct2_engine, "translator", counted)
    options = ct2_engine.options(num_beams=1, **BOUNDS[bound])
    with single_thread():
        got = ct2_engine.translate(SENTENCES, options, batch_size=8, scores=True)
        expected = torch_engine.translate(SENTENCES, options, batch_size=8, scores=True)
    assert counted.rows == sum(1 for sentence in SENTENCES if sentence.strip())
    assert texts(got) == texts(expected)
    assert scores(got) == pytest.approx(scores(expected), abs=2e-3)


@pytest.mark.parametrize("early_stopping", [True, False])
def test_the_onnx_engines_beam_search_gives_the_torch_engines_n_best_lists_and_scores(torch_engine, onnx_engine,
                                                                                       early_stopping):
    """Beam search as generate() decodes it (ONNX: either early_stopping), n-best lists and their beam scores."""
    options = torch_engine.options(num_beams=3, num_return_sequences=2, max_len_a=1.0, max_len_b=3)
    options = DecodingOptions(**{**vars(options), "early_stopping": early_stopping})
    with single_thread():
        expected = torch_engine.translate(SENTENCES, options, batch_size=8, scores=True)
        got = onnx_engine.translate(SENTENCES, options, batch_size=8, scores=True)
    assert texts(got) == texts(expected) and all(len(hypotheses) == 2 for hypotheses in got)
    assert len({text for text, _ in texts(expected)}) > 5
    assert scores(got) == pytest.approx(scores(expected), abs=2e-3)


@pytest.mark.parametrize("engine_name", ["torch_engine", "ct2_engine", "onnx_engine"])
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
    generation_config = torch_engine.model.generation_config
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
        open_engine(folders["rnn_seq2seq"], dtype="bfloat16", int8=True)
    with pytest.raises(ValueError, match="must be one of torch, ctranslate2, onnx, got 'tensorrt'"):
        load_engine(folders["rnn_seq2seq"], "tensorrt")


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


# ---- every engine honours what generate() and translate do ------------------------------------------------------
# Every engine of the registry, in each weight type it decodes, on the same folders of each family it runs: the
# folder's generation config decodes as generate() decodes it on the same weights (or the engine refuses the setting
# by name, before decoding), blank lines come back blank in place, and a source longer than the model reads gives
# translate's warning. The onnx engine decodes the folders' ONNX exports (made once, their generation config edited
# per case, which is all an export of the edited folder would change); tests above load it on a model folder.

EOS = 2
# (seed, factor on the </s> row of the output layer): random tiny models whose outputs differ per sentence and end
# at varied lengths (some after 1 to 3 tokens, where minimum lengths bind), and that invent a translation for a
# blank line
VARIED = {"transformer_seq2seq": (3, 3.0), "rnn_seq2seq": (4, -2.5)}
SUITE = [pytest.param(engine, weights, model_type, id=f"{engine}-{weights}-{model_type.split('_')[0]}")
         for engine, weights in (("torch", "float32"), ("torch", "bfloat16"), ("torch", "int8"),
                                 ("ctranslate2", "float32"), ("onnx", "float32"))
         for model_type in VARIED if model_type in ENGINES[engine].families]
SOURCES = TEXTS[:16] + ["a"]
# generation config fields (None: written as null) -> (the engines that refuse them, the setting they name); the
# other engines decode them as generate() does
CASES = {
    "as saved": ({}, (), None),
    "max_new_tokens over max_length": ({"max_new_tokens": 3}, (), None),
    "max_length": ({"max_length": 5}, (), None),
    "no length and no bound: the family's 128": (
        {"max_length": None, "max_len_a": None, "max_len_b": None}, (), None),
    "min_length": ({"min_length": 4, "max_new_tokens": 6}, (), None),
    "min_new_tokens over min_length": ({"min_length": 6, "min_new_tokens": 2, "max_new_tokens": 7}, (), None),
    "a binding length bound": ({"max_len_a": 0.5, "max_len_b": 2}, (), None),
    "suppressed tokens": ({"suppress_tokens": list(range(100, 280)), "max_new_tokens": 6}, (), None),
    "beam search, early stopping": ({"num_beams": 3, "early_stopping": True, "max_new_tokens": 6}, (), None),
    "n-best lists": ({"num_beams": 3, "num_return_sequences": 2, "early_stopping": True, "max_new_tokens": 6}, (),
                     None),
    "beam search, early_stopping False": ({"num_beams": 3, "early_stopping": False, "max_new_tokens": 6},
                                          ("ctranslate2",), "early_stopping"),
    "beam search, minimum length": ({"num_beams": 3, "early_stopping": True, "min_new_tokens": 2,
                                     "max_new_tokens": 6}, ("ctranslate2",), "min_new_tokens"),
    "no_repeat_ngram_size": ({"no_repeat_ngram_size": 2}, ("ctranslate2", "onnx"), "no_repeat_ngram_size"),
    "repetition_penalty": ({"repetition_penalty": 1.5}, ("ctranslate2", "onnx"), "repetition_penalty"),
}


def varied_folder(folder: Path, model_type: str, **config) -> Path:
    seed, factor = VARIED[model_type]
    save_tiny_model_folder(folder, model_type, seed=seed, **config)
    model = load_model(folder)
    with torch.no_grad():
        model.get_output_embeddings().weight[EOS] *= factor
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def suite_folders(tmp_path_factory) -> dict[str, tuple[Path, Path | None]]:
    """(model folder, its ONNX export) of each family, and of a Transformer with a learned table of 8 positions."""
    base = tmp_path_factory.mktemp("suite")
    folders = {model_type: varied_folder(base / model_type, model_type) for model_type in VARIED}
    folders["learned"] = varied_folder(base / "learned", "transformer_seq2seq", position_embedding_type="learned",
                                       max_position_embeddings=8)
    with_generation_config(folders["learned"], max_new_tokens=6)  # within the table
    exports = {}
    if all(importlib.util.find_spec(name) for name in ("onnx", "onnxruntime", "onnxscript")):
        for name, folder in folders.items():
            assert run_command("export-onnx", [str(folder), str(base / f"{name}_onnx")]) == 0
            exports[name] = base / f"{name}_onnx"
    return {name: (folder, exports.get(name)) for name, folder in folders.items()}


def with_generation_config(folder: Path, **fields) -> Path:
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}, indent=2))
    return folder


def case_folders(suite_folders, name: str, tmp_path: Path, **fields) -> tuple[Path, Path | None]:
    """Copies of a model folder and of its ONNX export with ``fields`` in their generation config (the export's graphs
    do not read it: the export of the edited folder differs from the copy in generation_config.json alone)."""
    copies = []
    for kind, source in zip(("model", "onnx"), suite_folders[name], strict=True):
        if source is None:
            copies.append(None)
            continue
        shutil.copytree(source, tmp_path / kind)
        copies.append(with_generation_config(tmp_path / kind, **fields))
    return copies[0], copies[1]


WEIGHT_FLAGS = {"float32": {}, "bfloat16": {"dtype": "bfloat16"}, "int8": {"int8": True}}


def opened(engine: str, weights: str, folder: Path, export: Path | None):
    """``engine`` opened on the folder (the onnx engine on its export): read, not loaded."""
    if engine == "onnx":
        if export is None:
            pytest.skip("onnx, onnxruntime and onnxscript are needed")
        folder = export
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    return open_engine(folder, engine, threads=None if engine == "torch" else 1, **WEIGHT_FLAGS[weights])


def engine_translations(engine: str, weights: str, folder: Path, export: Path | None, sentences: list[str]) -> list[str]:
    """Each sentence's hypotheses by ``engine`` (the generation config's num_return_sequences of them, best first, one
    list for all sentences as generate() returns them), with the options the folder's generation config completes."""
    opened_engine = opened(engine, weights, folder, export)
    options = opened_engine.options(num_return_sequences=None)
    with single_thread():
        results = opened_engine.load().translate(sentences, options)
    return [hypothesis.text for hypotheses in results for hypothesis in hypotheses]


def reference_model(folder: Path, weights: str = "float32"):
    """The folder's model in ``weights``, as the torch engine decodes it."""
    model = load_model(folder)
    if weights == "bfloat16":
        return model.to(torch.bfloat16)
    return quantize_int8(model) if weights == "int8" else model


def generated(folder: Path, sentences: list[str], weights: str = "float32") -> list[str]:
    """generate() with the folder's generation config alone, on a padded batch: tokenizer + generate + batch_decode,
    on the weights the engine decodes with (the ctranslate2 and onnx engines: the float32 ones)."""
    model, tokenizer = reference_model(folder, weights), load_tokenizer(folder)
    with torch.no_grad(), single_thread():
        output = model.generate(**tokenizer(sentences, padding=True, return_tensors="pt"))
    return tokenizer.batch_decode(output, skip_special_tokens=True)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(("engine", "weights", "model_type"), SUITE)
def test_every_engine_decodes_the_folders_generation_config_as_generate(suite_folders, tmp_path, engine, weights,
                                                                         model_type, case):
    fields, refused_by, setting = CASES[case]
    folder, export = case_folders(suite_folders, model_type, tmp_path, **fields)
    if engine in refused_by:  # by name, from the folder's files: before any weights are loaded
        unloaded = opened(engine, weights, folder, export)
        with pytest.raises(ValueError) as refusal:
            unloaded.options()
        assert f"{setting}=" in str(refusal.value) and ENGINES[engine].label in str(refusal.value)
        assert not unloaded.loaded
        return
    expected = generated(folder, SOURCES, weights)
    assert len(set(expected)) > 4  # varied outputs: the comparison has teeth
    assert engine_translations(engine, weights, folder, export, SOURCES) == expected


@pytest.mark.parametrize(("engine", "weights", "model_type"), SUITE)
def test_every_engine_gives_blank_lines_back_blank_in_place(suite_folders, engine, weights, model_type):
    folder, export = suite_folders[model_type]
    assert generated(folder, [""], weights) != [""]  # the model invents a translation for a blank line: it has teeth
    lines = ["a b c", "", "d e f g", "   ", "\u200b\u200d", "h", "\ufeff"]
    words = [line for line in lines if line.strip("\u200b\u200d\ufeff ")]
    translations = engine_translations(engine, weights, folder, export, lines)
    assert [translations[i] for i in (1, 3, 4, 6)] == [""] * 4
    assert [translations[i] for i in (0, 2, 5)] == generated(folder, words, weights)


LIMITS = [pytest.param(*param.values, "the tokenizer's model_max_length", id=f"{param.id}-model_max_length")
          for param in SUITE] + [pytest.param(*param.values, "the model's learned position table",
                                              id=f"{param.id}-learned positions")
                                 for param in SUITE if param.values[2] == "transformer_seq2seq"]


@pytest.mark.parametrize(("engine", "weights", "model_type", "limit"), LIMITS)
def test_every_engine_cuts_a_long_source_with_translates_warning(suite_folders, tmp_path, caplog, engine, weights,
                                                                model_type, limit):
    """The same words as translate(), and the translation of the source cut as the tokenizer cuts it."""
    if limit == "the model's learned position table":
        folder, export = suite_folders["learned"]  # a table of 8 positions, no model_max_length
    else:
        folder, export = case_folders(suite_folders, model_type, tmp_path)
        for copy in filter(None, (folder, export)):
            tokenizer_config = copy / "tokenizer_config.json"
            tokenizer_config.write_text(json.dumps({**json.loads(tokenizer_config.read_text()), "model_max_length": 8}))
    lines = ["a b", "a b c d e f g h i j a b", "c d", "j i h g f e d c b a j i h"]
    tokenizer, model = load_tokenizer(folder), reference_model(folder, weights)
    with caplog.at_level(logging.WARNING):
        expected = translate(model, tokenizer, lines, scores=False)
    warning = [record.getMessage() for record in caplog.records if "sentences are longer than" in record.getMessage()]
    assert warning == [f"2 of 4 sentences are longer than the 8 source tokens the model reads ({limit}) and are "
                       f"translated cut to them: lines 2 ({len(tokenizer(lines[1])['input_ids'])} tokens), 4 "
                       f"({len(tokenizer(lines[3])['input_ids'])} tokens)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        translations = engine_translations(engine, weights, folder, export, lines)
    assert [record.getMessage() for record in caplog.records
            if "sentences are longer than" in record.getMessage()] == warning
    assert translations == [hypotheses[0].text for hypotheses in expected]
    with torch.no_grad(), single_thread():  # the sources cut as the tokenizer cuts them, in one padded batch
        cut = model.generate(**tokenizer(lines, truncation=True, max_length=8, padding=True, return_tensors="pt"))
    assert translations == tokenizer.batch_decode(cut, skip_special_tokens=True)


@pytest.mark.parametrize("engine", ["ctranslate2", "onnx"])
def test_translate_command_refuses_what_an_engine_decodes_otherwise_before_reading_weights(suite_folders, tmp_path,
                                                                                            engine):
    """The folder's setting is named from its files alone: its weights are unreadable here."""
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    elif not ONNX:
        pytest.skip("onnx, onnxruntime and onnxscript are needed")
    folder, _ = case_folders(suite_folders, "transformer_seq2seq", tmp_path, no_repeat_ngram_size=2)
    source = tmp_path / "in.txt"
    source.write_text("a b c\n")
    assert run_command("translate", [str(folder), "--input", str(source)]) == 0  # generate() implements it
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(SystemExit) as exit_info:
        run_command("translate", [str(folder), "--input", str(source), "--engine", engine])
    assert exit_info.value.code.startswith(f"error: the generation config sets no_repeat_ngram_size=2, which "
                                           f"{ENGINES[engine].label} does not implement")


def test_an_alignment_reads_its_sentence_as_translate_does(suite_folders, caplog):
    """Cut to the learned position table, with translate's warning (the whole sentence does not fit the table), and
    of the translation generate() gives the cut source."""
    folder, _ = suite_folders["learned"]
    engine = load_engine(folder, "torch")
    sentence = "a b c d e f g h i j a b"
    with caplog.at_level(logging.WARNING):
        alignment = engine.alignment(sentence, engine.options())
    assert "1 of 1 sentences are longer than the 8 source tokens the model reads (the model's learned position " \
           "table)" in caplog.text
    cut = engine.tokenizer(sentence, truncation=True, max_length=8)["input_ids"]
    assert alignment.source_tokens == engine.tokenizer.convert_ids_to_tokens(cut)
    with torch.no_grad():
        expected = engine.model.generate(torch.tensor([cut]))[0, 1:].tolist()  # the folder's generation config
    assert alignment.target_tokens == engine.tokenizer.convert_ids_to_tokens(expected)


# ---- one registry, options resolved once -------------------------------------------------------------------------


def engine_choices(main, argv: list[str], capsys) -> str:
    """The choices argparse names when a command is given an unknown engine."""
    with pytest.raises(SystemExit):
        main([*argv, "--engine", "tensorrt"])
    return capsys.readouterr().err.split("(choose from ")[1].split(")")[0]


def test_every_path_picks_its_engine_by_name_from_the_one_registry(folders, capsys):
    listed = ", ".join(map(repr, [*ENGINES, AUTO]))
    assert list(ENGINES) == ["torch", "ctranslate2", "onnx"]
    assert engine_choices(translate_command.main, [str(folders["rnn_seq2seq"])], capsys) == listed
    assert engine_choices(serve_command.main, [str(folders["rnn_seq2seq"])], capsys) == listed
    assert {configuration.engine for configuration in CONFIGURATIONS} <= set(ENGINES)  # the serving benchmark's rows
    assert {name for names in FASTEST_FIRST.values() for name in names} <= set(ENGINES)  # --engine auto's
    assert {(configuration.engine, configuration.weights) for configuration in CONFIGURATIONS} <= {
        (name, weights) for name, engine in ENGINES.items() for weights in engine.weight_types}
    for name, engine in ENGINES.items():  # each refuses a weight type it does not decode, by name, before loading
        if "bfloat16" not in engine.weight_types:
            if name == "ctranslate2":
                pytest.importorskip("ctranslate2")
            with pytest.raises(ValueError, match=f"{engine.label} decodes .* weights, not bfloat16"):
                open_engine(folders["transformer_seq2seq"], name, dtype="bfloat16")


class CountedResolve:
    """``DecodingOptions.resolve`` that counts its calls (and resolves as it does)."""

    def __init__(self):
        self.calls, self.resolve = 0, DecodingOptions.resolve.__func__

    def __call__(self, cls, *args, **kwargs):
        self.calls += 1
        return self.resolve(cls, *args, **kwargs)


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_translate_command_resolves_its_options_once(folders, tmp_path, monkeypatch, capsys, engine):
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    counted = CountedResolve()
    monkeypatch.setattr(DecodingOptions, "resolve", classmethod(counted))
    source = tmp_path / "in.txt"
    source.write_text("a b c\n\nd e\n")
    assert run_command("translate", [str(folders["transformer_seq2seq"]), "--input", str(source), "--engine", engine,
                                     "--beams", "2", "--max-len-a", "1.0"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3 and counted.calls == 1


def test_translate_command_with_the_onnx_engine_exports_on_start_into_a_temporary_folder(folders, tmp_path,
                                                                                         monkeypatch, capsys):
    """An RNN folder (CTranslate2 has none) translated end to end: the n-best lists and scores of generate(), the
    options resolved once, and the export's temporary folder gone afterwards."""
    if not ONNX:
        pytest.skip("onnx, onnxruntime and onnxscript are needed")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    counted = CountedResolve()
    monkeypatch.setattr(DecodingOptions, "resolve", classmethod(counted))
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES[:6]) + "\n")
    folder = folders["rnn_seq2seq"]
    with single_thread():
        assert run_command("translate", [str(folder), "--input", str(source), "--engine", "onnx", "--beams", "3",
                                         "--nbest", "2", "--scores", "--max-len-a", "1.0"]) == 0
    assert counted.calls == 1 and list((tmp_path / "tmp").iterdir()) == []
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    expected = translate(load_model(folder), load_tokenizer(folder), SENTENCES[:6], num_beams=3,
                         num_return_sequences=2, max_len_a=1.0)
    assert [(int(index), text) for index, text, _ in lines] == [(index, h.text) for index, hypotheses in
                                                                 enumerate(expected) for h in hypotheses]
    assert [float(score) for _, _, score in lines] == pytest.approx(scores(expected), abs=2e-3)
    assert len({text for _, text, _ in lines}) > 4


# ---- --engine auto ------------------------------------------------------------------------------------------------


def chosen(folders, model, **kwargs) -> tuple[str, str]:
    """(the engine --engine auto opens for ``model``, a model type of ``folders`` or a list of folders, with
    ``kwargs``, its reason); no weights are loaded."""
    choice = open_fastest_engine(folders[model] if isinstance(model, str) else model, **kwargs)
    assert not choice.engine.loaded and choice.engine.choice == choice.reason
    return choice.engine.name, choice.reason


def test_auto_picks_the_fastest_engine_that_decodes_the_call_as_generate_does(folders):
    """In the measured order (FASTEST_FIRST), each engine passed over for what it cannot decode exactly, said so."""
    pytest.importorskip("ctranslate2")
    fallback = "onnx" if ONNX else "torch"
    assert chosen(folders, "transformer_seq2seq")[0] == "ctranslate2"
    assert chosen(folders, "transformer_seq2seq", int8=True)[0] == "ctranslate2"
    # CTranslate2's beam search ends as generate(early_stopping=True): not the folder's default search
    engine, reason = chosen(folders, "transformer_seq2seq", call={"num_beams": 3})
    assert engine == fallback and "passed over ctranslate2: the ctranslate2 engine ends beam search" in reason
    engine, reason = chosen(folders, "rnn_seq2seq")
    assert engine == fallback
    assert "passed over ctranslate2: the ctranslate2 engine runs the Transformer family" in reason
    for kwargs in ({"call": {"shortlist": False, "coverage_penalty": 0.1, "num_beams": 2}}, {"dtype": "bfloat16"}):
        assert chosen(folders, "transformer_seq2seq", **kwargs)[0] == "torch"
    folder = str(folders["transformer_seq2seq"])
    assert chosen(folders, [folder, folder])[0] == "torch"  # an ensemble
    needs_alignment = open_fastest_engine(folder, needs=lambda engine: engine.check_alignment())
    assert needs_alignment.engine.name == "torch" and "gives no alignments" in needs_alignment.reason
    with pytest.raises(ValueError, match="num_return_sequences .* must be <= num_beams"):  # no engine decodes it
        open_fastest_engine(folder, call={"num_beams": 1, "num_return_sequences": 2})


def test_translate_and_serve_with_engine_auto_say_which_engine_and_decode_as_it(folders, ct2_engine, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES[:6]) + "\n")
    folder = str(folders["transformer_seq2seq"])
    assert run_command("translate", [folder, "--input", str(source), "--engine", "auto"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("--engine auto chose ctranslate2 (float32): the fastest engine")
    assert captured.out.splitlines() == [h[0].text for h in ct2_engine.translate(SENTENCES[:6], ct2_engine.options())]
    # the server refuses, naming --engine torch, a request the engine auto chose would decode otherwise
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from hf_s2s.serving.app import create_app
    from hf_s2s.serving.server import serve_in_thread

    engine = open_fastest_engine(folder, threads=1).engine.load()
    with serve_in_thread(create_app({"tf": engine})) as url:
        models = httpx.get(f"{url}/models").json()
        beam = httpx.post(f"{url}/translate", json={"sentences": ["a b"], "num_beams": 3})
    assert models[0]["engine"] == "ctranslate2" and models[0]["engine_choice"].startswith("--engine auto chose")
    assert beam.status_code == 422 and "--engine torch" in beam.json()["error"]
