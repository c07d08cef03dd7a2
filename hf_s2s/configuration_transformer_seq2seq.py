"""Placeholder: TransformerSeq2SeqConfig is being written (see the issue for this family)."""

from transformers import PreTrainedConfig


class TransformerSeq2SeqConfig(PreTrainedConfig):
    model_type = "transformer_seq2seq"
    is_encoder_decoder: bool = True


__all__ = ["TransformerSeq2SeqConfig"]
