"""hf_s2s: classic sequence-to-sequence models as first-class Hugging Face transformers models.

Importing the package registers both model families with ``AutoConfig``, ``AutoModel`` and
``AutoModelForSeq2SeqLM`` (``model_type`` "rnn_seq2seq" and "transformer_seq2seq"); importing it again is
harmless. It also registers :class:`SeparateVocabTokenizer` (separate source and target vocabularies in one
tokenizer, as MarianMT's) with ``AutoTokenizer``. :func:`quantize_int8` gives either family int8 weights for
inference on the CPU.
"""

# first: an unsupported transformers gets a message naming the supported versions, not a missing name
from .models.transformers_compat import MIN_TRANSFORMERS_VERSION, TESTED_TRANSFORMERS_VERSIONS

# isort: split
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

from .inference.analysis import encoder_attention, sentence_embeddings, similarity
from .inference.int8 import quantize_int8
from .models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from .models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from .models.families import FAMILIES
from .models.modeling_rnn_seq2seq import RNNSeq2SeqCache, RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel
from .models.modeling_transformer_seq2seq import (
    TransformerSeq2SeqForConditionalGeneration,
    TransformerSeq2SeqModel,
)
from .models.tokenization_separate_vocab import SeparateVocabTokenizer
from .models.version import __version__


def _register() -> None:
    for family in FAMILIES.values():
        config_cls, base_cls, lm_cls = family.config_class, family.base_model_class, family.lm_class
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        AutoModel.register(config_cls, base_cls, exist_ok=True)
        AutoModelForSeq2SeqLM.register(config_cls, lm_cls, exist_ok=True)
        # save_pretrained writes `auto_map` into config.json and copies the code files, so a saved folder
        # loads with trust_remote_code=True where hf_s2s is not installed.
        config_cls.register_for_auto_class()
        base_cls.register_for_auto_class("AutoModel")
        lm_cls.register_for_auto_class("AutoModelForSeq2SeqLM")
        # Makes the class findable by the name a separate-vocabulary folder's tokenizer_config.json gives
        # (AutoTokenizer looks registered classes up by name); joint folders name their own class.
        AutoTokenizer.register(config_cls, fast_tokenizer_class=SeparateVocabTokenizer, exist_ok=True)
    # save_pretrained writes `auto_map` into tokenizer_config.json and copies the tokenizer's code file.
    SeparateVocabTokenizer.register_for_auto_class("AutoTokenizer")


_register()

__all__ = [
    "MIN_TRANSFORMERS_VERSION",
    "TESTED_TRANSFORMERS_VERSIONS",
    "__version__",
    "RNNSeq2SeqCache",
    "RNNSeq2SeqConfig",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqForConditionalGeneration",
    "SeparateVocabTokenizer",
    "TransformerSeq2SeqConfig",
    "TransformerSeq2SeqModel",
    "TransformerSeq2SeqForConditionalGeneration",
    "quantize_int8",
    "encoder_attention",
    "sentence_embeddings",
    "similarity",
]
