"""The model families, each declared once: its classes, the code files its saved folders ship, its citation, the
config fields its model card shows and how a card and a results table describe it.

Everything else asks this registry (:data:`FAMILIES`, :func:`get_family`): the Auto-class registration in
``hf_s2s/__init__.py``, the training job's ``--model_type`` choices, the code-integrity manifest, the model card and
the results table. Adding a family means adding one :class:`Family` here. (This module is not shipped in saved
folders: nothing they hold imports it.)
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from .configuration_rnn_seq2seq import RNNSeq2SeqConfig
from .configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from .modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel
from .modeling_transformer_seq2seq import TransformerSeq2SeqForConditionalGeneration, TransformerSeq2SeqModel

# Shipped beside every family's code: the translation pipeline (modeling_common imports it, so save_pretrained copies
# it) and, with a separate-vocabulary tokenizer, that tokenizer's code (tokenizer.save_pretrained copies it).
PIPELINE_FILE = "pipeline_seq2seq.py"
TOKENIZER_CODE_FILE = "tokenization_separate_vocab.py"
# What every family's configuration and modeling files import with single-dot relative imports (so save_pretrained
# copies them too).
_SHARED_CODE_FILES = ("config_checks.py", "modeling_common.py", "output_vocabulary.py", "shortlist.py",
                      "term_constraints.py", "transformers_compat.py", "version.py", PIPELINE_FILE)

_VASWANI = """@inproceedings{vaswani2017attention,
    title = {Attention Is All You Need},
    author = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
              Gomez, Aidan N. and Kaiser, Lukasz and Polosukhin, Illia},
    booktitle = {Advances in Neural Information Processing Systems},
    year = {2017},
    eprint = {1706.03762},
    archivePrefix = {arXiv},
}"""
_BAHDANAU_LUONG = """@inproceedings{bahdanau2015neural,
    title = {Neural Machine Translation by Jointly Learning to Align and Translate},
    author = {Bahdanau, Dzmitry and Cho, Kyunghyun and Bengio, Yoshua},
    booktitle = {International Conference on Learning Representations},
    year = {2015},
    eprint = {1409.0473},
    archivePrefix = {arXiv},
}
@inproceedings{luong2015effective,
    title = {Effective Approaches to Attention-based Neural Machine Translation},
    author = {Luong, Thang and Pham, Hieu and Manning, Christopher D.},
    booktitle = {Proceedings of EMNLP},
    year = {2015},
    eprint = {1508.04025},
    archivePrefix = {arXiv},
}"""


def _describe_transformer(config: dict) -> str:
    return ("A Transformer encoder-decoder (Vaswani et al. 2017, arXiv:1706.03762) with "
            f"{'pre' if config['norm_position'] == 'pre' else 'post'}-LayerNorm residual blocks, "
            f"{config['position_embedding_type']} position embeddings and a decoder key/value cache for "
            "`generate()`.")


def _rnn_attention(config: dict, long: bool) -> str:
    attention = config["attention_type"]
    if long:
        text = {
            "bahdanau": "Bahdanau additive attention (arXiv:1409.0473)",
            "none": "no attention: the final encoder state is the context of every step (Cho et al. 2014)",
            "scaled_dot": "scaled dot-product attention (Vaswani et al. 2017, arXiv:1706.03762)",
        }.get(attention, f"Luong {attention.removeprefix('luong_')} attention (arXiv:1508.04025)")
    else:
        text = {"bahdanau": "Bahdanau", "none": "no attention", "scaled_dot": "scaled dot"}.get(
            attention, f"Luong {attention.removeprefix('luong_')}")
    if config["attention_heads"] > 1:
        text += f" with {config['attention_heads']} heads" if long else f", {config['attention_heads']} heads"
    return text


def _describe_rnn(config: dict) -> str:
    cell = config["cell_type"].upper()
    return (f"An RNN encoder-decoder: a {'bidirectional ' if config['bidirectional'] else ''}{cell} encoder and a "
            f"{cell} decoder with {_rnn_attention(config, long=True)}; `generate()` carries the recurrent state in "
            "a cache.")


@dataclass(frozen=True)
class Family:
    """One model family. ``describe`` and ``label`` take a config dict with every field (see :meth:`full_config`)."""

    model_type: str
    config_class: type
    base_model_class: type
    lm_class: type
    modeling_files: tuple[str, ...]  # the family's own configuration, modeling and attention files
    citation: str  # BibTeX, for the model card
    card_fields: tuple[str, ...]  # config fields the model card's architecture table shows
    describe: Callable[[dict], str] = field(repr=False)  # the model card's one-paragraph description
    label: Callable[[dict], str] = field(repr=False)  # the results table's short name ("GRU + Bahdanau")

    @property
    def code_files(self) -> tuple[str, ...]:
        """The code files a saved folder of this family holds (save_pretrained copies them)."""
        return self.modeling_files + _SHARED_CODE_FILES

    def defaults(self) -> dict:
        """Every config field at its default value (results.json stores only what differs)."""
        return self.config_class().to_dict()

    def full_config(self, config: dict | None = None) -> dict:
        """``config`` (a config.json dict, or the fields that differ from the defaults) over the defaults."""
        return {**self.defaults(), **(config or {})}


FAMILIES: dict[str, Family] = {family.model_type: family for family in (
    Family(
        model_type=TransformerSeq2SeqConfig.model_type,
        config_class=TransformerSeq2SeqConfig,
        base_model_class=TransformerSeq2SeqModel,
        lm_class=TransformerSeq2SeqForConditionalGeneration,
        modeling_files=("configuration_transformer_seq2seq.py", "modeling_transformer_seq2seq.py",
                        "attention_transformer_seq2seq.py"),
        citation=_VASWANI,
        card_fields=("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                     "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "norm_position",
                     "position_embedding_type", "activation_function", "dropout", "share_encoder_decoder_embeddings",
                     "tie_word_embeddings"),
        describe=_describe_transformer,
        label=lambda config: "Transformer",
    ),
    Family(
        model_type=RNNSeq2SeqConfig.model_type,
        config_class=RNNSeq2SeqConfig,
        base_model_class=RNNSeq2SeqModel,
        lm_class=RNNSeq2SeqForConditionalGeneration,
        modeling_files=("configuration_rnn_seq2seq.py", "modeling_rnn_seq2seq.py", "attention_rnn_seq2seq.py",
                        "cache_rnn_seq2seq.py"),
        citation=_BAHDANAU_LUONG,
        card_fields=("vocab_size", "cell_type", "attention_type", "bidirectional", "encoder_layers",
                     "decoder_layers", "encoder_embedding_size", "decoder_embedding_size", "encoder_hidden_size",
                     "decoder_hidden_size", "attention_size", "input_feeding", "decoder_init", "dropout",
                     "tie_word_embeddings"),
        describe=_describe_rnn,
        label=lambda config: f"{config['cell_type'].upper()} + {_rnn_attention(config, long=False)}",
    ),
)}
# Every code file a saved folder of any family can hold.
SHIPPED_CODE_FILES = tuple(sorted({name for family in FAMILIES.values() for name in family.code_files}
                                  | {TOKENIZER_CODE_FILE}))


def get_family(model_type: str) -> Family:
    """The family of ``model_type``; any other value is a ``ValueError`` naming the families."""
    if model_type not in FAMILIES:
        raise ValueError(f"model_type must be one of {list(FAMILIES)}, got {model_type!r}")
    return FAMILIES[model_type]


__all__ = ["FAMILIES", "PIPELINE_FILE", "SHIPPED_CODE_FILES", "TOKENIZER_CODE_FILE", "Family", "get_family"]
