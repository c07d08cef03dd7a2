"""One tokenizer object over separate source and target vocabularies, as MarianMT's tokenizer is: ``tokenizer(x)``
encodes with the source vocabulary, ``tokenizer(text_target=y)`` with the target one, and ``decode`` reads
target ids (what the model generates).

A saved folder holds ``tokenizer.json`` (source) and ``target_tokenizer.json`` (target), and this file, named
in ``tokenizer_config.json``'s ``auto_map``: ``AutoTokenizer.from_pretrained(folder, trust_remote_code=True)``
works where hf_s2s is not installed. This module therefore imports only transformers and tokenizers.
"""

import copy

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

TARGET_TOKENIZER_FILE = "target_tokenizer.json"


class SeparateVocabTokenizer(PreTrainedTokenizerFast):
    """A fast tokenizer whose backend is the source vocabulary's, switched to the target vocabulary's while
    ``text_target=`` is encoded (transformers' ``_switch_to_target_mode`` / ``_switch_to_input_mode`` hooks,
    as MarianTokenizer uses them). Both vocabularies put the special tokens at the same ids.

    ``len(tokenizer)`` is the source vocabulary's size (the encoder's ``vocab_size``);
    ``tokenizer.target_tokenizer`` is the target side as an ordinary tokenizer (``decoder_vocab_size`` is its
    length).
    """

    vocab_files_names = {**PreTrainedTokenizerFast.vocab_files_names, "target_tokenizer_file": TARGET_TOKENIZER_FILE}

    def __init__(self, *args, target_tokenizer_file=None, target_tokenizer_object=None, **kwargs):
        super().__init__(*args, **kwargs)
        if target_tokenizer_object is not None:
            self._target_backend = copy.deepcopy(target_tokenizer_object)
        else:
            try:
                self._target_backend = Tokenizer.from_file(str(target_tokenizer_file))
            except Exception as error:  # tokenizers raises its own exception type for a missing or bad file
                raise ValueError(
                    f"SeparateVocabTokenizer needs the target vocabulary: {TARGET_TOKENIZER_FILE} beside "
                    f"tokenizer.json (got {target_tokenizer_file!r}: {error}) or target_tokenizer_object="
                ) from error
        self._source_backend = self._tokenizer
        for token in self.all_special_tokens:
            source_id, target_id = self._source_backend.token_to_id(token), self._target_backend.token_to_id(token)
            if source_id != target_id:
                raise ValueError(f"special token {token} has id {source_id} in the source vocabulary but "
                                 f"{target_id} in the target vocabulary; they must agree")

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        """Both files are complete tokenizers.json serializations: ``__init__`` loads them as they are (for a
        subclass with its own ``__init__`` transformers would otherwise rebuild a bare model from the vocabulary,
        losing the normalizer and pre-tokenizer)."""
        return kwargs

    def _switch_to_input_mode(self):
        self._tokenizer = self._source_backend

    def _switch_to_target_mode(self):
        self._tokenizer = self._target_backend

    def _decode(self, token_ids, **kwargs):
        """Token ids to text with the target vocabulary: decoded ids are generated (or label) ids."""
        current, self._tokenizer = self._tokenizer, self._target_backend
        try:
            return super()._decode(token_ids, **kwargs)
        finally:
            self._tokenizer = current

    @property
    def target_tokenizer(self) -> PreTrainedTokenizerFast:
        """The target vocabulary as an ordinary tokenizer with the same special tokens."""
        return PreTrainedTokenizerFast(
            tokenizer_object=self._target_backend, clean_up_tokenization_spaces=self.clean_up_tokenization_spaces,
            **self.special_tokens_map,
        )

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        prefix = filename_prefix + "-" if filename_prefix else ""
        target_file = f"{save_directory}/{prefix}{TARGET_TOKENIZER_FILE}"
        self._target_backend.save(target_file)
        current, self._tokenizer = self._tokenizer, self._source_backend  # tokenizer.json is the source side
        try:
            file_names = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        finally:
            self._tokenizer = current
        return (*file_names, target_file)


__all__ = ["SeparateVocabTokenizer"]
