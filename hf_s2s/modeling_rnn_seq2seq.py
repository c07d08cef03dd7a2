"""Placeholder: the RNNSeq2Seq models are being written (see the issue for this family)."""

from transformers import GenerationMixin, PreTrainedModel

from .configuration_rnn_seq2seq import RNNSeq2SeqConfig


class RNNSeq2SeqPreTrainedModel(PreTrainedModel):
    config: RNNSeq2SeqConfig
    base_model_prefix = "model"


class RNNSeq2SeqModel(RNNSeq2SeqPreTrainedModel):
    pass


class RNNSeq2SeqForConditionalGeneration(RNNSeq2SeqPreTrainedModel, GenerationMixin):
    pass


__all__ = ["RNNSeq2SeqPreTrainedModel", "RNNSeq2SeqModel", "RNNSeq2SeqForConditionalGeneration"]
