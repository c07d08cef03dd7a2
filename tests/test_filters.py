"""Corpus filters (hf_s2s.data.filters): on a small corpus of real Multi30k sentences with the noise
web-crawled corpora have (repeated pairs, copies of the source as target, over-long and unbalanced pairs),
each filter drops exactly the pairs a plain recount in the test finds, in memory and streamed; validation and
test stay whole unless asked; the job reports the counts; bad values are one error line."""

import dataclasses
import gzip
import random
import re
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict, IterableDatasetDict
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from hf_s2s.cli import run_command
from hf_s2s.data import corpus as data_lib
from hf_s2s.data import tokenization
from hf_s2s.data.encoding import tokenize_corpus
from hf_s2s.data.filters import FILTER_FIELDS, FILTER_NAMES, CorpusFilter, EmptySplitError, PairFilters
from hf_s2s.training import run as job
from tests.runs import tiny_args, train_args
from tests.saved_folders import tiny_tokenizer

MAX_SOURCE, MAX_TARGET, RATIO = 24, 22, 1.8


def multi30k_pairs(prefix: str, count: int) -> list[tuple[str, str]]:
    folder = data_lib.resolve_data_dir()
    if folder is None:
        pytest.skip("Multi30k not found (set HF_S2S_DATA_DIR)")
    sides = [gzip.open(folder / f"{prefix}.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:count]
             for lang in ("de", "en")]
    return list(zip(*sides, strict=True))


def with_noise(pairs: list[tuple[str, str]], seed: int) -> list[tuple[str, str]]:
    """Real pairs, and after them: repeats (some with other whitespace), copies of the source as the target,
    two sentences glued into one (too long) and one-word targets (unbalanced), shuffled in."""
    rng = random.Random(seed)
    noise = [rng.choice(pairs) for _ in range(len(pairs) // 8)]
    noise += [(f"  {de}", f"{en}  ") for de, en in rng.sample(pairs, len(pairs) // 20)]
    noise += [(de, de) for de, _ in rng.sample(pairs, len(pairs) // 16)]
    noise += [(a[0] + " " + b[0], a[1] + " " + b[1]) for a, b in zip(rng.sample(pairs, 40), rng.sample(pairs, 40),
                                                                      strict=True)]
    noise += [(de, en.split()[0]) for de, en in rng.sample(pairs, 30)]
    mixed = pairs + noise
    rng.shuffle(mixed)
    return mixed


def write_folder(folder: Path, splits: dict[str, list[tuple[str, str]]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, pairs in splits.items():
        for side, lang in enumerate(("de", "en")):
            (folder / f"{prefix}.{lang}").write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    """A corpus folder of noisy real pairs (1,500 training pairs before noise, 300 validation and test pairs
    with their own repeats), and a BPE tokenizer trained on its training split."""
    splits = {"train": with_noise(multi30k_pairs("train", 1500), 0),
              "val": with_noise(multi30k_pairs("val", 300), 1),
              "test_2016_flickr": with_noise(multi30k_pairs("test_2016_flickr", 300), 2)}
    folder = write_folder(tmp_path_factory.mktemp("noisy"), splits)
    corpus = data_lib.load_text_folder(folder, "de", "en")
    tokenizer = tokenization.train_tokenizer(corpus["train"], "de", "en", vocab_size=600)
    return folder, splits, tokenizer


def recount(pairs: list[tuple[str, str]], tokenizer, filters: PairFilters) -> tuple[dict[str, int], list]:
    """What each filter should drop, recounted plainly from the definitions, and the pairs that should
    stay."""
    removed, kept, seen = dict.fromkeys(FILTER_NAMES, 0), [], set()
    for de, en in pairs:
        words = (" ".join(de.split()), " ".join(en.split()))
        source = len(tokenizer(de)["input_ids"])
        target = len(tokenizer(text_target=en)["input_ids"])
        if filters.identical and words[0] == words[1]:
            removed["identical"] += 1
        elif filters.duplicates and words in seen:
            removed["duplicate"] += 1
        elif filters.max_source_tokens and source > filters.max_source_tokens:
            seen.add(words)
            removed["source_too_long"] += 1
        elif filters.max_target_tokens and target > filters.max_target_tokens:
            seen.add(words)
            removed["target_too_long"] += 1
        elif filters.max_length_ratio and max(source, target) / min(source, target) > filters.max_length_ratio:
            seen.add(words)
            removed["length_ratio"] += 1
        else:
            seen.add(words)
            kept.append((de, en))
    return removed, kept


ALL = PairFilters(max_source_tokens=MAX_SOURCE, max_target_tokens=MAX_TARGET, max_length_ratio=RATIO, identical=True,
                  duplicates=True)
SETS = {"all": ALL, "text only": PairFilters(identical=True, duplicates=True),
        "tokens only": PairFilters(max_source_tokens=MAX_SOURCE, max_target_tokens=MAX_TARGET, max_length_ratio=RATIO),
        "duplicates only": PairFilters(duplicates=True)}


@pytest.mark.parametrize("streaming", [False, True], ids=["in memory", "streamed"])
@pytest.mark.parametrize("name", list(SETS))
def test_each_filter_drops_exactly_the_pairs_a_recount_finds(noisy, name, streaming):
    folder, splits, tokenizer = noisy
    filters = SETS[name]
    expected_removed, expected_kept = recount(splits["train"], tokenizer, filters)
    assert all(expected_removed[n] > 0 for n in FILTER_NAMES if getattr(filters, {
        "identical": "identical", "duplicate": "duplicates", "source_too_long": "max_source_tokens",
        "target_too_long": "max_target_tokens", "length_ratio": "max_length_ratio"}[n]))  # the noise is there to drop

    corpus_filter = CorpusFilter(filters, ("train",), "de", "en")
    corpus = corpus_filter.filter_texts(data_lib.load_text_folder(folder, "de", "en", streaming=streaming))
    tokenized = tokenize_corpus(corpus, tokenizer, "de", "en", max_source_length=None,
                                max_target_length=None, corpus_filter=corpus_filter)
    rows = list(tokenized["train"])
    counts = corpus_filter.counts()["train"]
    assert counts.complete and counts.pairs == len(splits["train"])
    assert counts.removed == expected_removed and counts.kept == len(expected_kept) == len(rows)
    assert [row["input_ids"] for row in rows] == tokenizer([de for de, _ in expected_kept])["input_ids"]
    assert [row["labels"] for row in rows] == tokenizer(text_target=[en for _, en in expected_kept])["input_ids"]
    # validation and test were not asked for: whole, and not counted
    assert len(list(tokenized["validation"])) == len(splits["val"]) and set(corpus_filter.counts()) == {"train"}


def test_a_stream_is_filtered_afresh_on_every_pass_and_counted_once(noisy):
    """Duplicate removal remembers one pass: a second pass through the stream keeps the same pairs (not none),
    and the counts stay those of one pass."""
    folder, splits, tokenizer = noisy
    corpus_filter = CorpusFilter(PairFilters(duplicates=True), ("train",), "de", "en")
    stream = corpus_filter.filter_texts(data_lib.load_text_folder(folder, "de", "en", streaming=True))["train"]
    first, second = list(stream), list(stream)
    assert first == second and len(first) == len(recount(splits["train"], tokenizer, PairFilters(duplicates=True))[1])
    assert corpus_filter.counts()["train"].pairs == len(splits["train"])


def test_a_stream_read_in_part_says_so(noisy):
    folder, _, _ = noisy
    corpus_filter = CorpusFilter(PairFilters(identical=True), ("train",), "de", "en")
    stream = corpus_filter.filter_texts(data_lib.load_text_folder(folder, "de", "en", streaming=True))["train"]
    for count, _ in enumerate(stream, start=1):
        if count == 100:
            break
    counts = corpus_filter.counts()["train"]
    assert not counts.complete and 100 <= counts.pairs < 200


@pytest.mark.parametrize("asked", [False, True], ids=["train only", "validation and test too"])
def test_the_job_filters_validation_and_test_only_when_asked(noisy, tmp_path, asked):
    """The data phase and the tokenization the trainer gets filter the training split; validation (what
    training validates on) and test (what the test set is scored on, decoded from its texts) only with the
    flag."""
    folder, splits, tokenizer = noisy
    args = tiny_args(tmp_path / "run", "transformer_seq2seq", "--dataset", str(folder), "--source_lang", "de",
                     "--target_lang", "en", "--max_train_samples", "100000", "--max_eval_samples", "100000",
                     "--max_test_samples", "100000", "--filter_duplicates", "--filter_max_source_tokens",
                     str(MAX_SOURCE), *(["--filter_validation_and_test"] if asked else []))
    corpus_filter = job.build_corpus_filter(args.data)
    corpus = job.load_corpus(args.data, args.selection, args.training, corpus_filter)
    tokenized = tokenize_corpus(corpus, tokenizer, "de", "en", corpus_filter=corpus_filter)
    filters = PairFilters(duplicates=True, max_source_tokens=MAX_SOURCE)
    expected = {split: recount(splits[prefix], tokenizer, filters)[1] if asked or split == "train" else splits[prefix]
                for split, prefix in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr"))}
    assert {split: len(rows) for split, rows in tokenized.items()} == {s: len(p) for s, p in expected.items()}
    assert [row["input_ids"] for row in tokenized["validation"]] == \
        tokenizer([de for de, _ in expected["validation"]])["input_ids"]
    scored = [example["translation"] for example in job.test_examples(corpus, tokenizer, corpus_filter)]
    assert [(pair["de"], pair["en"]) for pair in scored] == expected["test"]
    assert set(corpus_filter.report()["splits"]) == ({"train", "validation", "test"} if asked else {"train"})


BAD_VALUES = [
    (["--filter_max_source_tokens", "1"],
     r"--filter_max_source_tokens must be an integer of at least 2 tokens \(one token and </s>; a pair above it is "
     r"dropped\), got 1"),
    (["--filter_max_target_tokens", "0"], r"--filter_max_target_tokens must be an integer of at least 2 tokens"),
    (["--filter_max_length_ratio", "0.5"], r"--filter_max_length_ratio must be a number of at least 1 .*got 0.5"),
    (["--filter_max_length_ratio", "inf"], r"--filter_max_length_ratio must be a number of at least 1 .*got inf"),
    (["--filter_validation_and_test"], r"--filter_validation_and_test applies the --filter_\* flags to the "
                                       r"validation and test splits, but none is set"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_VALUES, ids=["source-1", "target-0", "ratio-half", "ratio-inf",
                                                                 "eval-without-filter"])
def test_a_bad_filter_value_is_one_error_line_before_anything_is_read(tmp_path, flags, message):
    with pytest.raises(SystemExit) as refused:
        run_command("train", train_args(tmp_path / "run", *flags))
    code = str(refused.value.code)
    assert re.match("error: " + message, code) and "\n" not in code, code
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_run_records_what_each_filter_removed_and_scores_the_kept_test_pairs(noisy, tmp_path, caplog):
    """results.json and the model card say what each filter removed from each split; the test set is scored on
    the pairs kept."""
    folder, splits, _ = noisy
    out = tmp_path / "run"
    results = job.run(*tiny_args(out, "transformer_seq2seq", "--dataset", str(folder), "--source_lang", "de",
                                 "--target_lang", "en", "--max_train_samples", "100000", "--max_test_samples",
                                 "100000", "--max_eval_samples", "100000", "--max_steps", "2", "--eval_strategy", "no",
                                 "--save_strategy", "no", "--load_best_model_at_end", "false", "--test_num_beams", "1",
                                 "--generation_max_length", "4", "--filter_identical", "--filter_duplicates",
                                 "--filter_max_target_tokens", str(MAX_TARGET), "--filter_validation_and_test"))
    tokenizer = tokenization.TranslationTokenizers.from_pretrained(out / "tokenizer").source
    filters = PairFilters(identical=True, duplicates=True, max_target_tokens=MAX_TARGET)
    recorded = results["corpus_filters"]
    assert recorded["filters"] == {"max_target_tokens": MAX_TARGET, "identical": True, "duplicates": True}
    for split, prefix in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr")):
        removed, kept = recount(splits[prefix], tokenizer, filters)
        assert recorded["splits"][split] == {"pairs": len(splits[prefix]), "kept": len(kept), "removed": removed,
                                             "complete": True}
    kept_test = recount(splits["test_2016_flickr"], tokenizer, filters)[1]
    assert len((out / "test_hypotheses.greedy.txt").read_text().splitlines()) == len(kept_test)
    train = recorded["splits"]["train"]
    assert f"train: kept {train['kept']:,} of {train['pairs']:,} pairs" in (out / "model" / "README.md").read_text()
    assert f"corpus filters, split 'train': kept {train['kept']} of {train['pairs']} pairs" in caplog.text


# --------------------------------------------------------------------------------------------- empty splits

SHORT = [(word, word.upper()) for word in "abcdefghijklmnop"]  # one token and </s> a side
LONG = [(" ".join(f"{w}{v}" for w in "abcdefghij"), " ".join(f"{v}{w}" for w in "abcdefghij")) for v in "qrstuvwx"]
# (corpus folder splits, filter flags, the error that must stop the run): each filter set empties a split
EMPTIED = {
    "identical-train": ({"train": [(de, de) for de, _ in SHORT + LONG], "val": SHORT, "test": SHORT},
                        ["--filter_identical"],
                        r"split 'train' \(24 pairs: --filter_identical removed 24\), leaving nothing to train on: "
                        r"loosen those filters or leave them out$"),
    "tokens-train": ({"train": LONG, "val": SHORT, "test": SHORT},
                     ["--filter_max_source_tokens", "4", "--filter_duplicates"],
                     r"split 'train' \(8 pairs: --filter_max_source_tokens removed 8\), leaving nothing to train on"),
    "both-train": ({"train": LONG + LONG + [(de, de) for de, _ in SHORT], "val": SHORT, "test": SHORT},
                   ["--filter_identical", "--filter_duplicates", "--filter_max_source_tokens", "4"],
                   r"split 'train' \(32 pairs: --filter_identical removed 16, --filter_duplicates removed 8, "
                   r"--filter_max_source_tokens removed 8\)"),
    "tokens-validation": ({"train": SHORT, "val": LONG, "test": LONG},
                          ["--filter_max_source_tokens", "4", "--filter_validation_and_test"],
                          r"split 'validation' \(8 pairs: --filter_max_source_tokens removed 8\), leaving nothing "
                          r"to validate on: loosen those filters or leave them out, or leave out "
                          r"--filter_validation_and_test to keep it whole$"),
    "identical-test": ({"train": SHORT, "val": SHORT, "test": [(de, de) for de, _ in LONG]},
                       ["--filter_identical", "--filter_validation_and_test"],
                       r"split 'test' \(8 pairs: --filter_identical removed 8\), leaving nothing to score the test "
                       r"set on"),
}


@pytest.mark.parametrize("streaming", [False, True], ids=["in memory", "streamed"])
@pytest.mark.parametrize("case", list(EMPTIED))
def test_filters_that_empty_a_split_stop_the_run_before_training_naming_them_and_their_counts(tmp_path, case,
                                                                                              streaming):
    """hf-s2s train with filters that remove every pair of a split: one error line naming the split, each filter's
    flag and count, before any model is trained or saved; in memory and streamed alike (before: two different
    tracebacks in memory, a run on nothing that exited 0 with a saved model when streamed, a crash after training
    for validation and test)."""
    splits, flags, message = EMPTIED[case]
    folder = write_folder(tmp_path / "corpus", splits)
    out = tmp_path / "run"
    argv = train_args(out, "--dataset", str(folder), "--source_lang", "de", "--target_lang", "en",
                      "--max_train_samples", "1000", "--max_eval_samples", "1000", "--max_test_samples", "1000",
                      *flags, *(["--streaming"] if streaming else []))
    with pytest.raises(SystemExit) as stopped:
        run_command("train", argv)
    said = str(stopped.value.code)
    assert re.match(r"error: the corpus filters removed every pair of " + message, said) and "\n" not in said, said
    assert not (out / "model").exists() and not list(out.glob("checkpoint-*")) and not (out / "results.json").exists()


# --------------------------------------------------------------------------------------------- properties
# hypothesis searches the filters' neighbourhood: generated corpora (blank and whitespace-only sides, other
# whitespace, repeats, copies of the source, long and short sides, text outside the tokenizer's alphabet) under
# generated filter settings, in memory and streamed.

# Sides of 0 to 6 pieces: words the tokenizer knows, text outside its alphabet (<unk>), runs of whitespace of
# several kinds; blank and whitespace-only sides among them.
side_text = st.lists(st.one_of(st.sampled_from(["a", "b c", "d e f", "ä", "日本", "é\u0301"]),
                               st.text(alphabet="abcj \t\u00a0\u3000", max_size=6)),
                     max_size=6).map(" ".join)


def respaced(text: str) -> str:
    """``text`` with other whitespace between and around its words."""
    return "\t " + "\u00a0 ".join(text.split()) + "  "


@st.composite
def noisy_pairs(draw, min_size: int = 1) -> list[tuple[str, str]]:
    """Pairs of generated sides, with some of them repeated (as they were or respaced) or with the source copied
    to the target side (as it was or respaced), in any order."""
    pairs = draw(st.lists(st.tuples(side_text, side_text), min_size=min_size, max_size=10))
    for index in draw(st.lists(st.integers(0, len(pairs) - 1), max_size=5)):
        source, target = pairs[index]
        pairs.append(draw(st.sampled_from([(source, target), (respaced(source), respaced(target)),
                                           (source, source), (source, respaced(source))])))
    return draw(st.permutations(pairs))


def draw_filters(data, pairs: list[tuple[str, str]], tokenizer) -> PairFilters:
    """Filter settings with at least one filter on (none on, the corpus is not filtered at all) whose limits are
    mostly the corpus's own token counts and ratios, so that pairs right at a limit are common."""
    lengths = [(len(tokenizer(source)["input_ids"]), len(tokenizer(text_target=target)["input_ids"]))
               for source, target in pairs]
    sources, targets = sorted({s for s, _ in lengths}), sorted({t for _, t in lengths})
    ratios = sorted({max(pair) / min(pair) for pair in lengths} | {1})
    filters = PairFilters(
        max_source_tokens=data.draw(st.none() | st.sampled_from(sources).map(lambda n: max(n, 2)) | st.integers(2, 9)),
        max_target_tokens=data.draw(st.none() | st.sampled_from(targets).map(lambda n: max(n, 2)) | st.integers(2, 9)),
        max_length_ratio=data.draw(st.none() | st.sampled_from(ratios)),
        identical=data.draw(st.booleans()), duplicates=data.draw(st.booleans()))
    return filters or dataclasses.replace(filters, duplicates=True)


PROPERTY_SETTINGS = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def letters_tokenizer():
    """A real BPE tokenizer over a few letters: other characters are <unk>, whitespace only separates."""
    return tiny_tokenizer()


def violated(filters: PairFilters, pairs: list[tuple[str, str]], tokenizer) -> list[set[str]]:
    """Per pair, every filter of FILTER_NAMES it violates, from the definitions: its sides the same text up to
    whitespace, the same pair as an earlier one up to whitespace, more tokens (</s> included) than a limit, the
    longer side over the ratio times the shorter."""
    result, earlier = [], set()
    for source, target in pairs:
        key = (" ".join(source.split()), " ".join(target.split()))
        lengths = len(tokenizer(source)["input_ids"]), len(tokenizer(text_target=target)["input_ids"])
        broken = {name for name, on, broken in (
            ("identical", filters.identical, key[0] == key[1]),
            ("duplicate", filters.duplicates, key in earlier),
            ("source_too_long", filters.max_source_tokens, lengths[0] > (filters.max_source_tokens or 0)),
            ("target_too_long", filters.max_target_tokens, lengths[1] > (filters.max_target_tokens or 0)),
            ("length_ratio", filters.max_length_ratio,
             max(lengths) > (filters.max_length_ratio or 0) * min(lengths))) if on and broken}
        earlier.add(key)
        result.append(broken)
    return result


def filter_corpus(pairs: list[tuple[str, str]], filters: PairFilters, tokenizer, streaming: bool):
    """(the rows the filters keep of ``pairs`` as the train split, the filter's counts) through both stages as the
    job runs them: the text filters on the loaded corpus, the token filters as it is encoded."""
    split = Dataset.from_dict({"translation": [{"de": de, "en": en} for de, en in pairs]})
    corpus = IterableDatasetDict({"train": split.to_iterable_dataset()}) if streaming else DatasetDict(train=split)
    corpus_filter = CorpusFilter(filters, ("train",), "de", "en")
    corpus = corpus_filter.filter_texts(corpus)
    rows = list(tokenize_corpus(corpus, tokenizer, "de", "en", max_source_length=None, max_target_length=None,
                                corpus_filter=corpus_filter)["train"])
    return rows, corpus_filter.counts()["train"]


@given(pairs=noisy_pairs(), data=st.data())
@PROPERTY_SETTINGS
def test_filters_keep_exactly_the_pairs_that_satisfy_every_filter_and_count_the_rest(letters_tokenizer, pairs, data):
    """A kept pair satisfies every filter, a dropped pair violates one and is counted under the first it violates
    (in FILTER_NAMES order); the counts add up to the pairs read; streamed filtering keeps and counts the same as in
    memory."""
    filters = draw_filters(data, pairs, letters_tokenizer)
    broken = violated(filters, pairs, letters_tokenizer)
    kept = [pair for pair, names in zip(pairs, broken, strict=True) if not names]
    event("no pair kept" if not kept else "some pairs kept, some dropped" if len(kept) < len(pairs) else "all kept")
    if not kept:  # the next test's case
        with pytest.raises(EmptySplitError):
            filter_corpus(pairs, filters, letters_tokenizer, streaming=False)
        return
    rows, counts = filter_corpus(pairs, filters, letters_tokenizer, streaming=False)
    assert [row["input_ids"] for row in rows] == letters_tokenizer([de for de, _ in kept])["input_ids"]
    assert [row["labels"] for row in rows] == letters_tokenizer(text_target=[en for _, en in kept])["input_ids"]
    for row in rows:  # the kept rows themselves, read back
        source, target = len(row["input_ids"]), len(row["labels"])
        assert filters.max_source_tokens is None or source <= filters.max_source_tokens
        assert filters.max_target_tokens is None or target <= filters.max_target_tokens
        assert filters.max_length_ratio is None or max(source, target) <= filters.max_length_ratio * min(source,
                                                                                                           target)
    first_broken = [next(name for name in FILTER_NAMES if name in names) for names in broken if names]
    assert counts.complete and counts.pairs == len(pairs) and counts.kept == len(rows)
    assert counts.removed == {name: first_broken.count(name) for name in FILTER_NAMES}
    streamed_rows, streamed_counts = filter_corpus(pairs, filters, letters_tokenizer, streaming=True)
    assert streamed_rows == rows and streamed_counts.to_dict() == counts.to_dict()


@given(pairs=noisy_pairs(), data=st.data(), streaming=st.booleans())
@PROPERTY_SETTINGS
def test_filters_that_leave_no_pair_raise_naming_each_filter_and_its_count(letters_tokenizer, pairs, data, streaming):
    """A corpus every pair of which breaks some filter (the pairs that break none are left out of the generated
    corpus) is an EmptySplitError naming the split, the pairs read and what each filter removed, in memory and
    streamed."""
    filters = draw_filters(data, pairs, letters_tokenizer)
    broken = violated(filters, pairs, letters_tokenizer)
    # keep only pairs that break a filter; a pair that was a duplicate of a left-out one may then break none
    while not all(broken):
        pairs = [pair for pair, names in zip(pairs, broken, strict=True) if names]
        broken = violated(filters, pairs, letters_tokenizer)
    assume(pairs)
    first_broken = [next(name for name in FILTER_NAMES if name in names) for names in broken]
    said = ", ".join(f"{FILTER_FIELDS[name]} removed {first_broken.count(name)}" for name in FILTER_NAMES
                     if name in first_broken)
    with pytest.raises(EmptySplitError) as emptied:
        filter_corpus(pairs, filters, letters_tokenizer, streaming)
    assert str(emptied.value) == (f"the corpus filters removed every pair of split 'train' ({len(pairs)} pairs: "
                                  f"{said}), leaving nothing to train on: loosen those filters or leave them out")
