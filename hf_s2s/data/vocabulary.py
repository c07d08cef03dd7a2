"""What models decoded together (an ensemble) or averaged into one (checkpoint averaging) must share: the vocabularies
that map ids to tokens, source and target (a separate-vocabulary tokenizer has two), and the special token ids, as
their tokenizers and their configs hold them. Models of equal sizes but other vocabularies combine without any error
and give garbage: a de-en and a de-fr model of one source vocabulary average next-token distributions over unrelated
target tokens, and averaged embeddings mix rows of different tokens. :func:`check_same_vocabulary` is the one check
both use.
"""

from collections.abc import Sequence

from transformers import PreTrainedConfig, PreTrainedTokenizerBase

from .tokenization import vocabulary_differences

# The config fields decoding reads ids through: both vocabulary sizes and the special token ids.
VOCABULARY_FIELDS = ("vocab_size", "target_vocab_size", "pad_token_id", "bos_token_id", "eos_token_id",
                     "decoder_start_token_id")


def _config_field(config: PreTrainedConfig, field: str):
    """A :data:`VOCABULARY_FIELDS` value; ``target_vocab_size`` of a config that has none (not an hf_s2s family) is
    its ``decoder_vocab_size``, else its ``vocab_size``."""
    if field == "target_vocab_size" and not hasattr(config, field):
        return getattr(config, "decoder_vocab_size", None) or config.vocab_size
    return getattr(config, field, None)


def check_same_vocabulary(names: Sequence[str], *, purpose: str,
                          tokenizers: Sequence[PreTrainedTokenizerBase | None] | None = None,
                          configs: Sequence[PreTrainedConfig] | None = None) -> None:
    """Refuse members that do not share one vocabulary: tokenizers whose source or target vocabularies or special
    token ids differ (:func:`hf_s2s.data.tokenization.vocabulary_differences`; a None tokenizer is a member without one,
    not compared), and configs that differ in :data:`VOCABULARY_FIELDS`. The ValueError names the member (by
    ``names``), each difference with both values (the member's first, then the first member's), and ``purpose``:
    why the members must agree."""
    if not names:
        raise ValueError(f"nothing to compare: no members ({purpose})")
    with_tokenizer = [i for i, tokenizer in enumerate(tokenizers or []) if tokenizer is not None]
    for i, name in enumerate(names):
        differences = []
        if with_tokenizer and i in with_tokenizer[1:]:
            reference = with_tokenizer[0]
            differences += [f"{difference} (against {names[reference]}'s tokenizer)"
                            for difference in vocabulary_differences(tokenizers[i], tokenizers[reference])]
        if configs is not None and i > 0:
            differences += [f"{field} {_config_field(configs[i], field)!r} (against "
                            f"{_config_field(configs[0], field)!r})" for field in VOCABULARY_FIELDS
                            if _config_field(configs[i], field) != _config_field(configs[0], field)]
        if differences:
            raise ValueError(f"{name} does not share the vocabulary of {names[0]}: " + "; ".join(differences)
                             + f"; {purpose}")


__all__ = ["VOCABULARY_FIELDS", "check_same_vocabulary"]
