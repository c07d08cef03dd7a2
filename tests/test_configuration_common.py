"""Contracts both configs keep with transformers: a saved config.json carrying keys hf_s2s does not define (written
by transformers' quantizers, by a later transformers, or set by a person after construction) loads again; the family
checks run in ``validate()`` (and so in ``save_pretrained``) after a field changed; the decoder view transformers
takes of a flat encoder-decoder config has the real sizes; changing ``vocab_size`` of a one-vocabulary model
changes both ends."""

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM

from hf_s2s import RNNSeq2SeqConfig, TransformerSeq2SeqConfig
from tests.helpers import TINY

FAMILIES = {"rnn_seq2seq": RNNSeq2SeqConfig, "transformer_seq2seq": TransformerSeq2SeqConfig}


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_saved_config_with_unknown_keys_loads_them_as_attributes(model_type, tmp_path):
    config = FAMILIES[model_type](vocab_size=30)
    config.set_after_construction = "kept"
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    # what transformers' quantizers and a later transformers version write
    saved["quantization_config"] = {"quant_method": "torchao", "quant_type": "int8_weight_only"}
    saved["a_key_from_a_later_transformers"] = [1, 2]
    (tmp_path / "config.json").write_text(json.dumps(saved))

    for loaded in (AutoConfig.from_pretrained(tmp_path), FAMILIES[model_type].from_pretrained(tmp_path)):
        assert type(loaded) is FAMILIES[model_type]
        assert loaded.set_after_construction == "kept"
        assert loaded.a_key_from_a_later_transformers == [1, 2]
        assert loaded.quantization_config["quant_method"] == "torchao"


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_a_person_misspelling_a_field_still_gets_an_error(model_type):
    with pytest.raises(ValueError, match=r"unknown argument\(s\) \['vocab_sise'\]; the fields it defines are: .*vocab_size"):
        FAMILIES[model_type](vocab_sise=30)


@pytest.mark.parametrize(
    ("model_type", "field", "value", "message"),
    [
        ("transformer_seq2seq", "encoder_attention_heads", 7, "`d_model` (256) must be divisible by `encoder_attention_heads` (7)"),
        ("transformer_seq2seq", "dropout", 1.5, "`dropout` must be a float in [0, 1), got 1.5"),
        ("rnn_seq2seq", "cell_type", "rnn", "`cell_type` must be one of ['gru', 'lstm'], got 'rnn'"),
        ("rnn_seq2seq", "decoder_layers", 0, "`decoder_layers` must be a positive integer, got 0"),
    ],
)
def test_a_field_changed_after_construction_fails_validate_and_save(model_type, field, value, message, tmp_path):
    config = FAMILIES[model_type]()
    setattr(config, field, value)
    with pytest.raises(ValueError) as error:
        config.validate()
    assert message in str(error.value)
    with pytest.raises(ValueError):
        config.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_decoder_view_has_the_target_vocabulary_and_generic_sizes(model_type):
    shared = FAMILIES[model_type](vocab_size=30)
    assert shared.get_text_config(decoder=True).vocab_size == 30
    assert shared.get_text_config(encoder=True).vocab_size == 30
    separate = FAMILIES[model_type](vocab_size=30, decoder_vocab_size=20, **(
        {"share_encoder_decoder_embeddings": False, "tie_word_embeddings": False}
        if model_type == "transformer_seq2seq" else {}))
    assert separate.get_text_config(decoder=True).vocab_size == 20
    assert separate.get_text_config(encoder=True).vocab_size == 30
    # the generic names transformers reads map onto the decoder's fields in both families
    assert shared.hidden_size == (shared.d_model if model_type == "transformer_seq2seq" else shared.decoder_hidden_size)
    assert shared.num_hidden_layers == shared.decoder_layers


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_changing_vocab_size_of_a_one_vocabulary_config_changes_both_ends(model_type):
    config = AutoConfig.for_model(model_type, **TINY[model_type], vocab_size=30)
    config.vocab_size = 45
    model = AutoModelForSeq2SeqLM.from_config(config)
    assert model.get_input_embeddings().num_embeddings == 45
    assert model.get_output_embeddings().out_features == 45
    logits = model(input_ids=torch.tensor([[44, 2]]), decoder_input_ids=torch.tensor([[1, 44]])).logits
    assert logits.shape == (1, 2, 45)
