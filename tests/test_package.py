import importlib

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

import hf_s2s


def test_import_registers_both_families_idempotently():
    importlib.reload(hf_s2s)  # registering a second time must not raise
    for model_type, config_cls, base_cls, lm_cls in [
        ("rnn_seq2seq", hf_s2s.RNNSeq2SeqConfig, hf_s2s.RNNSeq2SeqModel, hf_s2s.RNNSeq2SeqForConditionalGeneration),
        ("transformer_seq2seq", hf_s2s.TransformerSeq2SeqConfig, hf_s2s.TransformerSeq2SeqModel,
         hf_s2s.TransformerSeq2SeqForConditionalGeneration),
    ]:
        config = AutoConfig.for_model(model_type)
        assert type(config).__name__ == config_cls.__name__
        assert AutoModel._model_mapping[type(config)].__name__ == base_cls.__name__
        assert AutoModelForSeq2SeqLM._model_mapping[type(config)].__name__ == lm_cls.__name__
