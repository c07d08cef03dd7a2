"""Built-in synthetic tasks for tests and smoke runs: they need no corpus and no download.

Token ids follow the package's convention for tokenizers it trains: 0 = <pad>, 1 = <s>, 2 = </s>, 3 = <unk>;
the task's symbols start at ``FIRST_SYMBOL_ID``.
"""

from dataclasses import dataclass

import torch
from datasets import Dataset, DatasetDict

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
FIRST_SYMBOL_ID = 4


def reversal_dataset(
    num_examples: int, num_symbols: int = 10, min_len: int = 3, max_len: int = 8, seed: int = 0
) -> Dataset:
    """Sequences of random symbols; the target is the source reversed. Both end with </s>.

    Vocabulary size needed: ``FIRST_SYMBOL_ID + num_symbols``.
    """
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (num_examples,), generator=generator).tolist()
    sources, targets = [], []
    for length in lengths:
        symbols = (torch.randint(0, num_symbols, (length,), generator=generator) + FIRST_SYMBOL_ID).tolist()
        sources.append(symbols + [EOS_ID])
        targets.append(symbols[::-1] + [EOS_ID])
    return Dataset.from_dict({"input_ids": sources, "labels": targets})


@dataclass
class PaddingCollator:
    """Pads pre-tokenized examples: ``input_ids`` with ``pad_token_id`` (plus ``attention_mask``), ``labels``
    with -100. Right padding. For text corpora use transformers' ``DataCollatorForSeq2Seq`` with the tokenizer."""

    pad_token_id: int = PAD_ID

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        batch = {}
        source_len = max(len(f["input_ids"]) for f in features)
        input_ids = torch.full((len(features), source_len), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(features), source_len), dtype=torch.long)
        for row, f in enumerate(features):
            input_ids[row, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
            attention_mask[row, : len(f["input_ids"])] = 1
        batch["input_ids"], batch["attention_mask"] = input_ids, attention_mask
        if "labels" in features[0]:
            target_len = max(len(f["labels"]) for f in features)
            labels = torch.full((len(features), target_len), -100, dtype=torch.long)
            for row, f in enumerate(features):
                labels[row, : len(f["labels"])] = torch.tensor(f["labels"])
            batch["labels"] = labels
        return batch


# ------------------------------------------------------------------------------------------- text-level tasks
# The same tasks as text, in the ``translation`` column layout of hf_s2s.data.corpus, so a smoke run goes through the
# real tokenizer training, tokenization and training pipeline. Language codes default to "src" and "tgt".

SYMBOLS = "abcdefghijklmnopqrstuvwxyz"

# A toy lexicon: source word -> target word. Sentences are subject-verb-object in the source and
# subject-object-verb in the target, with the adjective after its noun (a reordering rule to learn).
TOY_LEXICON = {
    "the": "ka", "a": "mi",
    "big": "garu", "small": "tini", "red": "roso", "old": "velo",
    "dog": "hundo", "cat": "kato", "bird": "fogo", "man": "viro", "child": "kindo",
    "sees": "vidas", "likes": "amas", "follows": "sekvas", "finds": "trovas",
}
_DETERMINERS, _ADJECTIVES = ("the", "a"), ("big", "small", "red", "old")
_NOUNS, _VERBS = ("dog", "cat", "bird", "man", "child"), ("sees", "likes", "follows", "finds")


def _text_splits(make_pair, sizes: dict[str, int], seed: int, source_lang: str, target_lang: str) -> DatasetDict:
    splits = {}
    for offset, (split, size) in enumerate(sizes.items()):
        generator = torch.Generator().manual_seed(seed + 1000 * offset)
        pairs = [make_pair(generator) for _ in range(size)]
        splits[split] = Dataset.from_dict({"translation": [{source_lang: src, target_lang: tgt} for src, tgt in pairs]})
    return DatasetDict(splits)


def text_reversal_corpus(
    num_train: int = 2000, num_validation: int = 200, num_test: int = 200, num_symbols: int = 10,
    min_len: int = 3, max_len: int = 8, seed: int = 0, source_lang: str = "src", target_lang: str = "tgt",
) -> DatasetDict:
    """Space-separated letters ("c a f"); the target is the sequence reversed ("f a c")."""
    if not 1 <= num_symbols <= len(SYMBOLS):
        raise ValueError(f"`num_symbols` must be in [1, {len(SYMBOLS)}], got {num_symbols}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")

    def make_pair(generator):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        symbols = [SYMBOLS[i] for i in torch.randint(0, num_symbols, (length,), generator=generator).tolist()]
        return " ".join(symbols), " ".join(reversed(symbols))

    return _text_splits(make_pair, {"train": num_train, "validation": num_validation, "test": num_test}, seed,
                        source_lang, target_lang)


def reorder_sentence(source: str) -> str:
    """The target of a source sentence "det [adj] noun verb det [adj] noun": every word through
    ``TOY_LEXICON``, adjectives after their noun, the verb last."""
    words = source.split()
    verb_at = next(i for i, w in enumerate(words) if w in _VERBS)

    def phrase(part: list[str]) -> list[str]:
        det, *adjectives, noun = part
        return [TOY_LEXICON[det], TOY_LEXICON[noun]] + [TOY_LEXICON[a] for a in adjectives]

    return " ".join(phrase(words[:verb_at]) + phrase(words[verb_at + 1 :]) + [TOY_LEXICON[words[verb_at]]])


def word_reordering_corpus(
    num_train: int = 2000, num_validation: int = 200, num_test: int = 200, seed: int = 0,
    source_lang: str = "src", target_lang: str = "tgt",
) -> DatasetDict:
    """Toy translation with a lexicon and word reordering: "the big dog sees a cat" -> "ka hundo garu mi kato
    vidas" (see :func:`reorder_sentence`)."""

    def pick(options, generator):
        return options[int(torch.randint(0, len(options), (1,), generator=generator))]

    def noun_phrase(generator):
        words = [pick(_DETERMINERS, generator)]
        if int(torch.randint(0, 2, (1,), generator=generator)):
            words.append(pick(_ADJECTIVES, generator))
        return words + [pick(_NOUNS, generator)]

    def make_pair(generator):
        source = " ".join(noun_phrase(generator) + [pick(_VERBS, generator)] + noun_phrase(generator))
        return source, reorder_sentence(source)

    return _text_splits(make_pair, {"train": num_train, "validation": num_validation, "test": num_test}, seed,
                        source_lang, target_lang)
