"""Saved model folders for the tests of the tools that read them (loading, translating, averaging): a real
tokenizer trained on a few letters and a random tiny model of either family, written with save_pretrained, in
seconds and without a training run."""

from pathlib import Path

from hf_s2s.data.tokenization import TranslationTokenizers, train_tokenizer_from_texts
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


def separate_vocabulary_folders(base: Path) -> dict[str, Path]:
    """A "de-en" and a "de-fr" model of the same sizes: one source vocabulary, target vocabularies of 280 tokens each
    whose letters differ (a-j against k-t), so that every config field and the source side agree."""
    shifted = str.maketrans("abcdefghij", "klmnopqrst")
    targets = {"de_en": train_tokenizer_from_texts(TEXTS, vocab_size=280, min_frequency=1),
               "de_fr": train_tokenizer_from_texts([text.translate(shifted) for text in TEXTS], vocab_size=280,
                                                   min_frequency=1)}
    assert len(targets["de_en"]) == len(targets["de_fr"])
    return {name: save_tiny_model_folder(base / name, "transformer_seq2seq", seed=3,
                                         tokenizer=TranslationTokenizers(tiny_tokenizer(), target).as_tokenizer(),
                                         decoder_vocab_size=len(target), share_encoder_decoder_embeddings=False)
            for name, target in targets.items()}
