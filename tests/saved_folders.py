"""Saved model folders for the tests of the tools that read them (loading, translating, averaging): a real
tokenizer trained on a few letters and a random tiny model of either family, written with save_pretrained, in
seconds and without a training run."""

from pathlib import Path

from hf_s2s.data.tokenization import train_tokenizer_from_texts
from tests.helpers import random_tiny_model

# Words of single letters: the tokenizer learns them all, and random models give different outputs per sentence.
TEXTS = [" ".join("abcdefghij"[(i * k) % 10] for k in range(1, 2 + i % 6)) for i in range(200)]


def tiny_tokenizer():
    return train_tokenizer_from_texts(TEXTS, vocab_size=280, min_frequency=1)


def save_tiny_model_folder(folder: str | Path, model_type: str, tokenizer=None, seed: int = 0, **config) -> Path:
    """A random tiny ``model_type`` model sized to ``tokenizer`` (default: :func:`tiny_tokenizer`), saved with the
    tokenizer in ``folder``: the folder any loading tool accepts. Returns the folder."""
    tokenizer = tokenizer or tiny_tokenizer()
    model = random_tiny_model(model_type, len(tokenizer), seed=seed, pad_token_id=tokenizer.pad_token_id,
                              bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                              decoder_start_token_id=tokenizer.bos_token_id, **config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return Path(folder)
