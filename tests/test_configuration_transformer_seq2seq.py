"""TransformerSeq2SeqConfig: defaults, round trip through config.json, and a ValueError naming the field, the
value and what is allowed for every bad value."""

import re

import pytest
from transformers import AutoConfig

from hf_s2s import TransformerSeq2SeqConfig


def test_defaults_are_the_reference_size_and_package_token_ids():
    config = TransformerSeq2SeqConfig()
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (256, 3, 3)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (8, 8)
    assert (config.encoder_ffn_dim, config.decoder_ffn_dim) == (512, 512)
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)
    assert config.decoder_start_token_id == 1
    assert config.norm_position == "pre" and config.position_embedding_type == "sinusoidal"
    assert config.is_encoder_decoder and config.use_cache
    # a shared vocabulary unless told otherwise; generic names map onto the decoder's fields (generate reads them)
    assert config.decoder_vocab_size is None and config.target_vocab_size == config.vocab_size
    assert config.num_hidden_layers == config.decoder_layers and config.hidden_size == config.d_model


def test_round_trip_through_save_and_autoconfig(tmp_path):
    config = TransformerSeq2SeqConfig(
        vocab_size=40, decoder_vocab_size=50, share_encoder_decoder_embeddings=False, d_model=32,
        encoder_layers=1, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=2,
        norm_position="post", position_embedding_type="learned", activation_function="gelu",
    )
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is TransformerSeq2SeqConfig
    assert loaded.to_diff_dict() == config.to_diff_dict()


@pytest.mark.parametrize(
    "kwargs, field, value, allowed",
    [
        ({"d_model": 30, "encoder_attention_heads": 4}, "encoder_attention_heads", "(4)", "allowed head counts"),
        ({"d_model": 32, "decoder_attention_heads": 5}, "decoder_attention_heads", "(5)", "allowed head counts"),
        ({"activation_function": "tanh"}, "activation_function", "'tanh'", "['relu', 'gelu']"),
        ({"norm_position": "middle"}, "norm_position", "'middle'", "['pre', 'post']"),
        ({"position_embedding_type": "rotary"}, "position_embedding_type", "'rotary'", "['sinusoidal', 'learned']"),
        ({"position_embedding_layout": "fairseq"}, "position_embedding_layout", "'fairseq'",
         "['concat', 'interleaved', 'tensor2tensor']"),
        ({"d_model": 2, "encoder_attention_heads": 1, "decoder_attention_heads": 1,
          "position_embedding_layout": "tensor2tensor"}, "position_embedding_layout", "'tensor2tensor'", "(got 2)"),
        ({"position_offset": -1}, "position_offset", "-1", "whole number >= 0"),
        ({"position_offset": 2, "position_embedding_type": "learned"}, "position_offset", "2", "a learned table"),
        ({"d_model": 0}, "d_model", "0", "positive integer"),
        ({"encoder_layers": -1}, "encoder_layers", "-1", "positive integer"),
        ({"decoder_layers": 0}, "decoder_layers", "0", "positive integer"),
        ({"encoder_ffn_dim": 0}, "encoder_ffn_dim", "0", "positive integer"),
        ({"decoder_attention_heads": 0}, "decoder_attention_heads", "0", "positive integer"),
        ({"vocab_size": 0}, "vocab_size", "0", "positive integer"),
        ({"max_position_embeddings": 0}, "max_position_embeddings", "0", "positive integer"),
        ({"dropout": 1.0}, "dropout", "1.0", "[0, 1)"),
        ({"attention_dropout": -0.1}, "attention_dropout", "-0.1", "[0, 1)"),
        ({"activation_dropout": 1.5}, "activation_dropout", "1.5", "[0, 1)"),
        ({"rdrop_alpha": float("inf")}, "rdrop_alpha", "inf", "finite float >= 0"),
        ({"init_std": 0}, "init_std", "0", "positive float"),
        ({"pad_token_id": 1000}, "pad_token_id", "1000", "[0, 1000)"),
        ({"decoder_start_token_id": -1}, "decoder_start_token_id", "-1", "[0, 1000)"),
        ({"decoder_vocab_size": 7}, "decoder_vocab_size", "7", "share_encoder_decoder_embeddings=False"),
    ],
)
def test_bad_values_name_field_value_and_allowed(kwargs, field, value, allowed):
    with pytest.raises(ValueError) as error:
        TransformerSeq2SeqConfig(**kwargs)
    message = str(error.value)
    assert f"`{field}`" in message
    assert value in message
    assert allowed in message


def test_unknown_keyword_is_an_error_listing_the_fields():
    with pytest.raises(ValueError, match=re.escape("unknown argument(s) ['num_layers']")) as error:
        TransformerSeq2SeqConfig(num_layers=6)
    assert "decoder_layers" in str(error.value) and "encoder_layers" in str(error.value)


def test_separate_vocabularies_need_unshared_embeddings():
    config = TransformerSeq2SeqConfig(vocab_size=40, decoder_vocab_size=50, share_encoder_decoder_embeddings=False)
    assert (config.vocab_size, config.decoder_vocab_size) == (40, 50)
