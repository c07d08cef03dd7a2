"""Built-in synthetic tasks for tests and smoke runs: they need no corpus and no download.

Token ids follow the package's convention for tokenizers it trains: 0 = <pad>, 1 = <s>, 2 = </s>, 3 = <unk>;
the task's symbols start at ``FIRST_SYMBOL_ID``.
"""

from dataclasses import dataclass

import torch
from datasets import Dataset

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
