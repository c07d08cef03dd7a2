"""Placeholder: the TransformerSeq2Seq models are being written (see the issue for this family)."""

from transformers import GenerationMixin, PreTrainedModel

from .configuration_transformer_seq2seq import TransformerSeq2SeqConfig


class TransformerSeq2SeqPreTrainedModel(PreTrainedModel):
    config: TransformerSeq2SeqConfig
    base_model_prefix = "model"


class TransformerSeq2SeqModel(TransformerSeq2SeqPreTrainedModel):
    pass


class TransformerSeq2SeqForConditionalGeneration(TransformerSeq2SeqPreTrainedModel, GenerationMixin):
    pass


__all__ = ["TransformerSeq2SeqPreTrainedModel", "TransformerSeq2SeqModel", "TransformerSeq2SeqForConditionalGeneration"]
