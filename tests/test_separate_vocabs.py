"""Separate source and target vocabularies through the main job (`--separate_vocabs`): the saved folder's
AutoTokenizer encodes sources with the source vocabulary and `text_target=` with the target one (as MarianMT's
tokenizer does), the model's decoder is sized by the target vocabulary, and the folder translates in this
process, through the pipeline, and from its Hub folder in a fresh process without hf_s2s."""

import json
import shutil

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

import hf_s2s  # noqa: F401
from hf_s2s.data.corpus import load_translation_corpus
from hf_s2s.data.tokenization import train_translation_tokenizers
from hf_s2s.hub.publish import HubFolderError, build_hub_folder, check_hub_folder
from hf_s2s.inference.translate import translate
from hf_s2s.models.loading import load_tokenizer
from hf_s2s.models.pipeline_seq2seq import Seq2SeqTranslationPipeline
from hf_s2s.training.checkpoints import list_checkpoints
from hf_s2s.training.run import build_model, parse_args, run
from tests.helpers import TINY, run_without_hf_s2s

# synthetic:reordering: English-like sources, an invented target language: two vocabularies with little overlap
LANGS = ("src", "tgt")
SOURCES = ["the small dog finds a old bird", "a red cat finds the cat", "the man follows a red child"]
TARGETS = ["ka hundo tini mi fogo velo trovas", "mi kato roso ka kato trovas", "ka viro mi kindo roso sekvas"]


def separate_args(output_dir, model_type="transformer_seq2seq", *extra, separate=True):
    vocabs = ["--separate_vocabs", "--vocab_size", "290", "--target_vocab_size", "300"] if separate else []
    return parse_args([
        "--dataset", "synthetic:reordering", "--source_lang", "src", "--target_lang", "tgt", *vocabs,
        "--model_type", model_type, "--model_config", json.dumps(TINY[model_type]),
        "--max_train_samples", "128", "--max_eval_samples", "16", "--max_test_samples", "8",
        "--num_train_epochs", "2", "--output_dir", str(output_dir), "--report_to", "none", "--use_cpu", "true",
        "--disable_tqdm", "true", "--per_device_train_batch_size", "32", "--per_device_eval_batch_size", "16",
        "--learning_rate", "3e-3", "--warmup_steps", "2", "--generation_max_length", "16", "--test_num_beams", "1",
        "--num_sample_translations", "2", *extra,
    ])


@pytest.fixture(scope="module", params=list(TINY))
def trained(request, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp(f"separate_{request.param}")
    results = run(*separate_args(output_dir, request.param))
    return output_dir / "model", results


@pytest.fixture(scope="module")
def varied(trained, tmp_path_factory):
    """The trained folder with its weights redrawn (std 0.3, seeded): a few tiny training steps teach a model to
    end every sentence at once, which would make the translation equalities below hold for empty strings."""
    model_dir, _ = trained
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                torch.nn.init.normal_(parameter, std=0.3)
    folder = tmp_path_factory.mktemp("varied")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(folder)
    shutil.copyfile(model_dir / "results.json", folder / "results.json")
    return folder


@pytest.mark.slow
def test_saved_tokenizer_encodes_each_side_with_its_own_vocabulary(trained):
    model_dir, _ = trained
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert type(tokenizer).__name__ == "SeparateVocabTokenizer"
    # The same vocabularies the job trained, rebuilt here from the same corpus slice.
    corpus = load_translation_corpus("synthetic:reordering", *LANGS)
    corpus["train"] = corpus["train"].select(range(128))
    expected = train_translation_tokenizers(corpus, *LANGS, 290, joint=False, target_vocab_size=300)
    assert tokenizer(SOURCES)["input_ids"] == expected.source(SOURCES)["input_ids"]
    assert tokenizer(text_target=TARGETS)["input_ids"] == expected.target(text_target=TARGETS)["input_ids"]
    both = tokenizer(SOURCES, text_target=TARGETS)
    assert both["labels"] == expected.target(TARGETS)["input_ids"]
    # The two sides really differ: one word has different ids as source and as target text.
    assert tokenizer(["kato"])["input_ids"] != tokenizer(text_target=["kato"])["input_ids"]
    # decode reads target ids (generated ones) and gives the text back; the source side round-trips too.
    assert tokenizer.batch_decode(both["labels"], skip_special_tokens=True) == TARGETS
    tokens = tokenizer.convert_ids_to_tokens(both["input_ids"][0], skip_special_tokens=True)
    assert "".join(tokens).replace("▁", " ").strip() == SOURCES[0]
    # The model's embedding tables follow the two vocabularies.
    config = AutoConfig.from_pretrained(model_dir)
    assert (config.vocab_size, config.decoder_vocab_size) == (len(tokenizer), len(tokenizer.target_tokenizer))
    assert len(expected.source) != len(expected.target)
    if config.model_type == "transformer_seq2seq":
        assert config.share_encoder_decoder_embeddings is False


@pytest.mark.slow
def test_saved_folder_translates_with_the_target_vocabulary(trained, varied):
    model_dir, results = varied, trained[1]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    translations = [h[0].text for h in translate(model, tokenizer, SOURCES, num_beams=1, max_new_tokens=12)]
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, max_length=13, num_beams=1)
    assert translations == tokenizer.target_tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert all(translations) and len(set(translations)) == len(SOURCES)  # the equalities have teeth
    translator = Seq2SeqTranslationPipeline(model=model, tokenizer=tokenizer)  # what the Hub folder ships
    assert [out["translation_text"] for out in translator(SOURCES, max_length=13, num_beams=1)] == translations
    assert results["model_config"]["decoder_vocab_size"] == len(tokenizer.target_tokenizer)


@pytest.mark.slow
def test_hub_folder_loads_the_tokenizer_as_remote_code(varied, tmp_path):
    model_dir = varied
    folder = build_hub_folder(model_dir, tmp_path / "hub", repo_id="someone/separate")
    assert (folder / "target_tokenizer.json").is_file() and (folder / "tokenization_separate_vocab.py").is_file()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    expected = [h[0].text for h in translate(model, tokenizer, SOURCES, num_beams=2, max_new_tokens=12)]
    result = run_without_hf_s2s(
        f"""
        import json
        from transformers import AutoTokenizer, pipeline
        tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        translator = pipeline("translation", model={str(folder)!r}, trust_remote_code=True)
        texts = [o["translation_text"] for o in translator({SOURCES!r}, num_beams=2, max_length=13)]
        print(json.dumps({{"labels": tokenizer(text_target={TARGETS!r})["input_ids"], "texts": texts,
                          "class": type(tokenizer).__module__ + "." + type(tokenizer).__name__}}))
        """,
        cwd=tmp_path,
    )
    assert result["class"].startswith("transformers_modules.") and result["class"].endswith("SeparateVocabTokenizer")
    assert result["labels"] == tokenizer(text_target=TARGETS)["input_ids"]
    assert result["texts"] == expected and all(expected)
    # the tokenizer's code is part of what the folder check requires (and scans)
    (folder / "tokenization_separate_vocab.py").unlink()
    with pytest.raises(HubFolderError, match="loads tokenization_separate_vocab.py, which is not a regular file of the folder"):
        check_hub_folder(folder)


@pytest.mark.slow
def test_a_tokenizer_left_in_output_dir_is_never_reused_for_other_vocabularies(trained):
    """The separate-vocabulary tokenizer an earlier run left is never silently reused by a joint run: the folder is
    refused, and resuming it with joint vocabularies stops before training, naming the difference."""
    output_dir = trained[0].parent
    with pytest.raises(ValueError, match="--overwrite_output_dir"):
        run(*separate_args(output_dir, "transformer_seq2seq", separate=False))
    checkpoint = list_checkpoints(output_dir)[-1]
    with pytest.raises(ValueError, match=r"separate_vocabs: True there, False now"):
        run(*separate_args(output_dir, "transformer_seq2seq", "--resume_from_checkpoint", str(checkpoint),
                           separate=False))


def test_separate_vocab_flags_are_checked_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="--target_vocab_size is the target side of --separate_vocabs"):
        run(*parse_args(["--target_vocab_size", "300", "--output_dir", str(tmp_path), "--dataset", "nowhere"]))
    with pytest.raises(ValueError, match="--separate_vocabs trains new tokenizers"):
        run(*parse_args(["--separate_vocabs", "--tokenizer_name_or_path", "x", "--output_dir", str(tmp_path),
                         "--dataset", "nowhere"]))


def test_train_tokenizer_output_sizes_a_model_through_tokenizer_name_or_path(tmp_path):
    """What `hf-s2s train-tokenizer --separate_vocabs` saves is one folder the main job loads."""
    corpus = load_translation_corpus("synthetic:reordering", *LANGS)
    corpus["train"] = corpus["train"].select(range(128))
    pair = train_translation_tokenizers(corpus, *LANGS, 290, joint=False, target_vocab_size=300)
    pair.save_pretrained(tmp_path / "tok")
    model_args = parse_args(["--tokenizer_name_or_path", str(tmp_path / "tok"), "--output_dir", str(tmp_path),
                             "--model_config", json.dumps(TINY["transformer_seq2seq"])]).model
    model = build_model(model_args, load_tokenizer(model_args.tokenizer_name_or_path))
    assert (model.config.vocab_size, model.config.decoder_vocab_size) == (len(pair.source), len(pair.target))
