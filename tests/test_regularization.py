"""Subword regularization (--bpe_dropout, --unigram_alpha): without sampling the sampler is the tokenizer itself (on
Multi30k, for 🤗-trained and SentencePiece BPE and Unigram models); its draws follow the published algorithms (exact
distributions computed here by enumeration, and sentencepiece's own Unigram sampler); the segmentations are a function
of (seed, epoch, example); and in the training job only training batches are resegmented, a resumed run resegments
as the uninterrupted one did, and the saved tokenizer stays deterministic."""

import collections
import io
import json
import math
import random

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerFast

from hf_s2s.data import corpus as data
from hf_s2s.data.regularization import RegularizedTrainSet, SubwordSampler, check_regularization
from hf_s2s.data.sentencepiece_models import parse_model, sentencepiece_tokenizer
from hf_s2s.data.tokenization import train_tokenizer_from_texts
from hf_s2s.training import run as job
from tests.helpers import TINY, assert_generates_alike_without_hf_s2s, multi30k_lines
from tests.runs import CrashAt, tiny_args

spm = pytest.importorskip("sentencepiece")

REORDERING = ("--dataset", "synthetic:reordering", "--vocab_size", "300")




def sentencepiece_model(texts, model_type, vocab_size=1000, **options):
    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=writer, model_type=model_type,
                                   vocab_size=vocab_size, minloglevel=2, num_threads=1, **options)
    return writer.getvalue()


@pytest.fixture(scope="module")
def tokenizers():
    """🤗-trained (byte fallback) and SentencePiece-converted (sentencepiece's defaults: <unk>) BPE and Unigram."""
    texts = multi30k_lines("train.de.gz")[:4000] + multi30k_lines("train.en.gz")[:4000]
    return {
        "bpe": train_tokenizer_from_texts(texts, 1200, "bpe"),
        "unigram": train_tokenizer_from_texts(texts, 1200, "unigram"),
        "spm-bpe": sentencepiece_tokenizer(parse_model(sentencepiece_model(texts, "bpe"))),
        "spm-unigram": sentencepiece_tokenizer(parse_model(sentencepiece_model(texts, "unigram"))),
        "spm-unigram-model": sentencepiece_model(texts, "unigram"),
    }


def flag_for(name):
    return {"bpe_dropout": 0.1} if "bpe" in name else {"unigram_alpha": 0.2}


def total_variation(counts, probabilities, n):
    return sum(abs(counts[key] / n - probabilities.get(key, 0.0)) for key in counts.keys() | probabilities.keys()) / 2


@pytest.mark.parametrize("name", ["bpe", "unigram", "spm-bpe", "spm-unigram"])
def test_without_sampling_the_sampler_gives_the_tokenizers_own_ids(tokenizers, name):
    tokenizer = tokenizers[name]
    texts = multi30k_lines("val.de.gz") + multi30k_lines("val.en.gz") + \
        multi30k_lines("test_2016_flickr.cs.gz")[:300] + ["", "  Ein  Hund\tläuft ", "Ein Schneemann ☃ und 😀 — ǅ", "ﬁne ①", "▁x ▁ ▁▁y", "A" * 200]
    sampler = SubwordSampler(tokenizer, **flag_for(name))
    differing = [text for text in texts if sampler.encode(text, None) != tokenizer(text, add_special_tokens=False)
                 ["input_ids"]]
    assert differing == []
    assert sampler.sample_ids("Ein Hund.", None) == tokenizer("Ein Hund.")["input_ids"]  # </s> at the end


def bpe_dropout_distribution(symbols: tuple, ranks: dict, p: float) -> dict[tuple, float]:
    """The exact distribution of BPE-dropout's result (Provilkov et al. 2020, Algorithm 1): at each step every
    applicable merge is left out with probability p, the best-ranked remaining one is applied; none left: stop."""
    candidates = sorted((ranks[pair], position) for position, pair in enumerate(zip(symbols[:-1], symbols[1:],
                                                                                      strict=True)) if pair in ranks)
    result: dict[tuple, float] = collections.defaultdict(float)
    if not candidates:
        result[symbols] = 1.0
        return result
    for k, (_, position) in enumerate(candidates):  # the k best are dropped, the next applied
        merged = symbols[:position] + (symbols[position] + symbols[position + 1],) + symbols[position + 2:]
        for final, probability in bpe_dropout_distribution(merged, ranks, p).items():
            result[final] += p ** k * (1 - p) * probability
    result[symbols] += p ** len(candidates)
    return result


@pytest.mark.parametrize("name", ["bpe", "spm-bpe"])
def test_bpe_dropout_draws_as_provilkov_et_al(tokenizers, name):
    tokenizer = tokenizers[name]
    sampler = SubwordSampler(tokenizer, bpe_dropout=0.25)
    for word in ("▁Straße", "▁spielen"):
        exact = bpe_dropout_distribution(tuple(word), sampler.ranks, 0.25)
        assert len(exact) > 5
        n = 20000
        counts = collections.Counter(tuple(tokenizer.convert_ids_to_tokens(sampler._bpe(word, random.Random(i))))
                                     for i in range(n))
        assert total_variation(counts, exact, n) < 0.03, word


def unigram_distribution(word: str, vocab: dict, scores: list, alpha: float) -> dict[tuple, float]:
    """Every segmentation of ``word`` into pieces, with probability proportional to exp(alpha * sum of scores)."""
    def segmentations(rest):
        if not rest:
            yield ()
        for end in range(1, len(rest) + 1):
            if rest[:end] in vocab:
                for tail in segmentations(rest[end:]):
                    yield (rest[:end], *tail)
    weights = {seg: math.exp(alpha * sum(scores[vocab[piece]] for piece in seg)) for seg in segmentations(word)}
    total = sum(weights.values())
    return {seg: weight / total for seg, weight in weights.items()}


@pytest.mark.parametrize("name", ["unigram", "spm-unigram"])
def test_unigram_sampling_draws_with_probability_p_to_the_alpha(tokenizers, name):
    tokenizer = tokenizers[name]
    sampler = SubwordSampler(tokenizer, unigram_alpha=0.3)
    for word in ("▁Straße", "▁spielen"):
        exact = unigram_distribution(word, sampler.vocab, sampler.scores, 0.3)
        assert len(exact) > 3
        n = 20000
        counts = collections.Counter(tuple(tokenizer.convert_ids_to_tokens(sampler._unigram(word, random.Random(i))))
                                     for i in range(n))
        assert total_variation(counts, exact, n) < 0.03, word


def test_unigram_sampling_draws_as_sentencepiece_does(tokenizers):
    """The same distribution as sentencepiece's own sampler (nbest_size=-1) on whole sentences of its model."""
    processor = spm.SentencePieceProcessor(model_proto=tokenizers["spm-unigram-model"])
    sampler = SubwordSampler(tokenizers["spm-unigram"], unigram_alpha=0.3)
    spm.set_random_generator_seed(1)
    n = 20000
    for text in ("Ein Mann spielt.", "Kinder spielen"):
        ours = collections.Counter(tuple(sampler.encode(text, random.Random(i))) for i in range(n))
        theirs = collections.Counter(tuple(processor.encode(text, enable_sampling=True, alpha=0.3, nbest_size=-1))
                                     for _ in range(n))
        assert len(theirs) > 10
        assert total_variation(ours, {key: count / n for key, count in theirs.items()}, n) < 0.05, text


@pytest.mark.parametrize("name", ["bpe", "unigram", "spm-bpe", "spm-unigram"])
def test_segmentations_are_a_function_of_seed_epoch_and_example(tokenizers, name):
    tokenizer = tokenizers[name]
    german, english = multi30k_lines("val.de.gz")[:200], multi30k_lines("val.en.gz")[:200]
    deterministic = {"input_ids": tokenizer(german)["input_ids"], "labels": tokenizer(text_target=english)["input_ids"]}
    tokenized = Dataset.from_dict(deterministic)
    sampler = SubwordSampler(tokenizer, **flag_for(name))

    def dataset(seed, epoch, max_length=None):
        train_set = RegularizedTrainSet(tokenized, list(zip(german, english, strict=True)), sampler, sampler, seed,
                                        max_length, max_length)
        train_set.set_epoch(epoch)
        return train_set

    items = [dataset(1, 0)[i] for i in range(200)]
    assert [dataset(1, 0)[i] for i in reversed(range(200))] == items[::-1]  # order does not matter
    assert [dataset(1, 1)[i] for i in range(200)] != items and [dataset(2, 0)[i] for i in range(200)] != items
    resegmented = sum(item["input_ids"] != ids for item, ids in zip(items, deterministic["input_ids"], strict=True))
    assert resegmented > 50
    # the same text, the same special tokens, the attention mask fits
    assert tokenizer.batch_decode([item["input_ids"] for item in items], skip_special_tokens=True) == \
        tokenizer.batch_decode(deterministic["input_ids"], skip_special_tokens=True)
    assert tokenizer.batch_decode([item["labels"] for item in items], skip_special_tokens=True) == \
        tokenizer.batch_decode(deterministic["labels"], skip_special_tokens=True)
    assert all(item["input_ids"][-1] == item["labels"][-1] == tokenizer.eos_token_id for item in items)
    assert all(item["attention_mask"] == [1] * len(item["input_ids"]) for item in items)
    # truncated as the corpus is: the first tokens and </s>
    for item in (dataset(1, 0, max_length=6)[i] for i in range(200)):
        assert len(item["input_ids"]) <= 6 and item["input_ids"][-1] == tokenizer.eos_token_id
    assert dataset(1, 0).lengths() == ([len(ids) for ids in deterministic["input_ids"]],
                                       [len(ids) for ids in deterministic["labels"]])


def test_flags_are_refused_out_of_range_or_for_the_other_model(tokenizers):
    for bpe_dropout, unigram_alpha, message in ((-0.1, None, "--bpe_dropout"), (1.0, None, "--bpe_dropout"),
                                                (None, 0.0, "--unigram_alpha"), (None, math.nan, "--unigram_alpha"),
                                                (0.1, 0.1, "regularize different subword models")):
        with pytest.raises(ValueError, match=message):
            check_regularization(bpe_dropout, unigram_alpha)
    with pytest.raises(ValueError, match="the tokenizer is a Unigram model: use --unigram_alpha"):
        SubwordSampler(tokenizers["spm-unigram"], bpe_dropout=0.1)
    with pytest.raises(ValueError, match="the tokenizer is a BPE model: use --bpe_dropout"):
        SubwordSampler(tokenizers["bpe"], unigram_alpha=0.1)


@pytest.mark.parametrize(("flags", "message"), [
    (("--bpe_dropout", "0.1", "--tokenizer_type", "unigram"), "--bpe_dropout regularizes bpe tokenizers, but "
                                                              "--tokenizer_type is unigram"),
    (("--unigram_alpha", "0.2"), "--unigram_alpha regularizes unigram tokenizers"),
    (("--bpe_dropout", "1.5"), r"--bpe_dropout is the probability of leaving out a merge, in \[0, 1\)"),
    (("--bpe_dropout", "0.1", "--streaming", "true", "--max_steps", "2"), "cannot be combined with --streaming"),
    (("--bpe_dropout", "0.1", "--dataloader_num_workers", "1", "--dataloader_persistent_workers", "true"),
     "leave out --dataloader_persistent_workers"),
    (("--bpe_dropout", "0.1", "--filter_max_source_tokens", "50", "--filter_max_length_ratio", "3"),
     "--filter_max_source_tokens, --filter_max_length_ratio judge the fixed segmentation"),
])
def test_the_job_refuses_regularization_it_cannot_do_before_anything_is_read(tmp_path, flags, message):
    with pytest.raises(ValueError, match=message):
        job.run(*tiny_args(tmp_path / "run", "transformer_seq2seq", *flags))
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def regularized_trainer(tmp_path_factory):
    """The tiny job's trainer on synthetic:reordering (real words) with BPE-dropout 0.3, built by the job's phases."""
    args = tiny_args(tmp_path_factory.mktemp("run"), "transformer_seq2seq", *REORDERING, "--bpe_dropout", "0.3")
    corpus = job.load_corpus(args.data, args.selection, args.training)
    tokenizer = job.prepare_tokenizer(args.model, args.data, args.training, corpus["train"])
    model, _ = job.prepare_model(args.model, args.decoding, args.training, tokenizer)
    return job.build_trainer(model, tokenizer, corpus, args), corpus, tokenizer


def test_only_training_batches_are_resegmented(regularized_trainer):
    trainer, corpus, tokenizer = regularized_trainer
    deterministic = {split: tokenizer([p["src"] for p in corpus[split]["translation"]])["input_ids"]
                     for split in ("train", "validation")}
    assert isinstance(trainer.train_dataset, RegularizedTrainSet)
    train_rows = [row for batch in trainer.get_train_dataloader() for row in batch["input_ids"].tolist()]
    train_rows = [[token for token in row if token != tokenizer.pad_token_id] for row in train_rows]
    assert len(train_rows) == 256
    changed = [row for row in train_rows if row not in deterministic["train"]]
    assert len(changed) > 50  # resegmented...
    decoded = set(tokenizer.batch_decode(train_rows, skip_special_tokens=True))
    assert decoded == {p["src"] for p in corpus["train"]["translation"]}  # ...the same sentences
    eval_rows = [row for batch in trainer.get_eval_dataloader() for row in batch["input_ids"].tolist()]
    eval_rows = [[token for token in row if token != tokenizer.pad_token_id] for row in eval_rows]
    # validation keeps the tokenizer's own segmentation (in the evaluation sampler's order)
    assert sorted(eval_rows) == sorted(deterministic["validation"])


def test_the_saved_tokenizer_has_no_dropout(regularized_trainer, tmp_path):
    _, _, tokenizer = regularized_trainer
    tokenizer.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "tokenizer.json").read_text())
    assert saved["model"]["type"] == "BPE" and saved["model"]["dropout"] is None
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = ["the small dog finds a old bird"] * 20
    assert len({tuple(ids) for ids in reloaded(texts)["input_ids"]}) == 1


class RecordSegmentations:
    """Records every training example the job's dataset hands out, in order: (epoch, index, source ids, labels)."""

    def __init__(self, monkeypatch):
        self.records = []
        getitem = RegularizedTrainSet.__getitem__

        def recording(dataset, index):
            item = getitem(dataset, index)
            self.records.append((dataset.epoch, index, item["input_ids"], item["labels"]))
            return item
        monkeypatch.setattr(RegularizedTrainSet, "__getitem__", recording)


@pytest.mark.slow
@pytest.mark.parametrize("batching", [(), ("--max_tokens_per_batch", "1200")], ids=["group_by_length", "tokens"])
def test_a_resumed_run_resegments_and_ends_like_an_uninterrupted_one(tmp_path, monkeypatch, batching):
    # 256 pairs, 8 (or fewer) steps an epoch; killed at step 14, resumed from checkpoint-12, in the second epoch
    common = (*REORDERING, *batching, "--bpe_dropout", "0.3", "--eval_strategy", "no", "--save_strategy", "steps",
              "--save_steps", "4", "--max_steps", "16", "--load_best_model_at_end", "false", "--test_num_beams", "1",
              "--model_config", json.dumps({**TINY["transformer_seq2seq"], "dropout": 0.1}))
    straight = RecordSegmentations(monkeypatch)
    job.run(*tiny_args(tmp_path / "straight", "transformer_seq2seq", *common))
    with pytest.raises(KeyboardInterrupt):
        job.run(*tiny_args(tmp_path / "killed", "transformer_seq2seq", *common), callbacks=[CrashAt(14)])
    resumed = RecordSegmentations(monkeypatch)
    job.run(*tiny_args(tmp_path / "killed", "transformer_seq2seq", *common,
                       "--resume_from_checkpoint", str(tmp_path / "killed" / "checkpoint-12")))
    # the batches after the checkpoint hold the segmentations the uninterrupted run trained on
    assert resumed.records and resumed.records[0][0] == 1
    assert resumed.records == straight.records[-len(resumed.records):]
    # ...which differ between epochs: the equality has teeth
    first_epoch = {index: ids for epoch, index, ids, _ in straight.records if epoch == 0}
    assert sum(first_epoch[index] != ids for epoch, index, ids, _ in straight.records if epoch == 1) > 20
    weights = load_file(tmp_path / "straight" / "model" / "model.safetensors")
    resumed_weights = load_file(tmp_path / "killed" / "model" / "model.safetensors")
    for key in weights:
        torch.testing.assert_close(resumed_weights[key], weights[key], rtol=0, atol=0, msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("separate", [False, True], ids=["joint", "separate"])
def test_a_run_on_sentencepiece_models_with_sampling_translates_raw_text_without_hf_s2s(tmp_path, separate):
    pairs = data.load_translation_corpus("synthetic:reordering", "src", "tgt")["train"]["translation"]
    sources, targets = [p["src"] for p in pairs], [p["tgt"] for p in pairs]
    # sentencepiece's default ids; the separate models of unequal sizes share <pad> by --pad_id (the remedy the
    # refusal of unequal ones names)
    small = {"hard_vocab_limit": False}
    models = {"joint.model": sentencepiece_model(sources + targets, "unigram", 120, **small),
              "src.model": sentencepiece_model(sources, "unigram", 80, pad_id=3, **small),
              "tgt.model": sentencepiece_model(targets, "unigram", 90, pad_id=3, **small)}
    for name, serialized in models.items():
        (tmp_path / name).write_bytes(serialized)
    given = ("--tokenizer_name_or_path", str(tmp_path / "src.model"), "--target_tokenizer_name_or_path",
             str(tmp_path / "tgt.model")) if separate else ("--tokenizer_name_or_path", str(tmp_path / "joint.model"))
    output_dir = tmp_path / "run"
    job.run(*tiny_args(output_dir, "transformer_seq2seq", "--dataset", "synthetic:reordering", *given,
                       "--unigram_alpha", "0.2", "--test_num_beams", "1"))
    folder = output_dir / "model"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert (type(tokenizer).__name__ == "SeparateVocabTokenizer") == separate
    source_model = spm.SentencePieceProcessor(model_proto=models["src.model" if separate else "joint.model"])
    assert tokenizer(sources[:20])["input_ids"] == [ids + [2] for ids in source_model.encode(sources[:20])]
    assert json.loads((folder / "tokenizer.json").read_text())["model"].get("alpha") is None
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    raw = ["the small dog finds a old bird", "a red cat finds the man"]
    assert_generates_alike_without_hf_s2s(model, tokenizer, folder, raw, tmp_path, num_beams=2, max_length=12)
