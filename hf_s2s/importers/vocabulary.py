"""A toolkit's vocabulary as a transformers tokenizer that maps every token to the id the toolkit gave it.

The old toolkits read text already split into tokens (words, or subwords from an external BPE / SentencePiece
step that the user ran before training and runs before translating): a line is its tokens separated by spaces.
The tokenizer here does exactly that, a whitespace split and a word-level lookup in the toolkit's own order,
so a converted folder sees the same ids the toolkit saw. Segmenting raw text into subwords stays the user's
step, as it was with the toolkit.
"""

from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..data.tokenization import TranslationTokenizers
from .checkpoints import CheckpointError


@dataclass(frozen=True)
class SpecialTokens:
    """The special tokens' strings in a toolkit's vocabulary; ``bos`` is None where the toolkit has none."""

    unk: str
    pad: str
    bos: str | None
    eos: str


def word_level_tokenizer(tokens: list[str], specials: SpecialTokens, append_eos: bool) -> PreTrainedTokenizerFast:
    """A tokenizer over ``tokens`` (token i gets id i, the toolkit's order) that splits on whitespace and,
    when ``append_eos``, ends every encoded sequence with the end token (the toolkits that give the encoder an
    end token do so; the decoder's labels always end with it)."""
    duplicates = sorted({token for token in tokens if tokens.count(token) > 1}) if len(set(tokens)) < len(tokens) else []
    if duplicates:
        raise ValueError(f"the vocabulary lists {', '.join(map(repr, duplicates[:5]))} more than once: ids would be "
                         "ambiguous")
    missing = [token for token in (specials.unk, specials.pad, specials.eos, specials.bos) if token is not None
               and token not in tokens]
    if missing:
        raise ValueError(f"the vocabulary lacks the special token(s) {missing}")
    vocab = {token: index for index, token in enumerate(tokens)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=specials.unk))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if append_eos:
        backend.post_processor = processors.TemplateProcessing(
            single=f"$A {specials.eos}", pair=f"$A {specials.eos} $B {specials.eos}",
            special_tokens=[(specials.eos, vocab[specials.eos])])
    named = {"unk_token": specials.unk, "pad_token": specials.pad, "eos_token": specials.eos}
    if specials.bos is not None:
        named["bos_token"] = specials.bos
    return PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=False, **named)


def translation_tokenizer(source_tokens: list[str], target_tokens: list[str], specials: SpecialTokens,
                          source_eos: bool) -> PreTrainedTokenizerBase:
    """One tokenizer for the converted folder: joint when both sides list the same tokens, else the
    separate-vocabulary tokenizer (sources encode with the source vocabulary, ``text_target=`` and ``decode``
    use the target one). Labels always end with the end token; sources do when ``source_eos``."""
    for side, tokens in (("source", source_tokens), ("target", target_tokens)):
        ids = [tokens.index(token) if token in tokens else None for token in (specials.unk, specials.pad, specials.eos)]
        if None in ids:
            raise ValueError(f"the {side} vocabulary lacks a special token ({specials})")
    source = word_level_tokenizer(source_tokens, specials, append_eos=source_eos)
    if source_tokens == target_tokens and source_eos:
        return source
    target = word_level_tokenizer(target_tokens, specials, append_eos=True)
    special_ids = [source.convert_tokens_to_ids(t) == target.convert_tokens_to_ids(t)
                   for t in (specials.unk, specials.pad, specials.eos, specials.bos) if t is not None]
    if not all(special_ids):
        raise ValueError("the source and target vocabularies put the special tokens at different ids; hf_s2s's "
                         "separate-vocabulary tokenizer needs them at the same ids")
    return TranslationTokenizers(source, target).as_tokenizer()


def check_vocabulary_sizes(state: dict[str, torch.Tensor], source_size: int, target_size: int,
                           source_from: str, target_from: str) -> None:
    """Refuse vocabularies whose sizes are not the converted model's token tables' (``state``, hf_s2s names):
    the source one against the encoder's table, the target one against the decoder's (the encoder's when
    shared) and the output layer's rows. ``source_from`` / ``target_from`` say where each vocabulary was
    read."""
    encoder = state["model.encoder.embed_tokens.weight"]
    tables = [("source", source_size, source_from, "the encoder's token table", encoder),
              ("target", target_size, target_from, "the decoder's token table",
               state.get("model.decoder.embed_tokens.weight", encoder)),
              ("target", target_size, target_from, "the output layer", state.get("lm_head.weight"))]
    for side, size, where, what, table in tables:
        if table is not None and table.shape[0] != size:
            raise CheckpointError(f"{where} lists {size} {side} tokens (specials included), but {what} in "
                                  f"the checkpoint has {table.shape[0]} rows: not this model's {side} "
                                  "vocabulary")


__all__ = ["SpecialTokens", "check_vocabulary_sizes", "translation_tokenizer", "word_level_tokenizer"]
