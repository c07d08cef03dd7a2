"""Placeholder: RNNSeq2SeqConfig is being written (see the issue for this family)."""

from transformers import PreTrainedConfig


class RNNSeq2SeqConfig(PreTrainedConfig):
    model_type = "rnn_seq2seq"
    is_encoder_decoder: bool = True


__all__ = ["RNNSeq2SeqConfig"]
