"""RNNSeq2SeqConfig: defaults, round trip, and a ValueError naming field and allowed values for every bad value."""

import pytest
from transformers import AutoConfig

from hf_s2s import RNNSeq2SeqConfig


def test_defaults_and_token_ids():
    config = RNNSeq2SeqConfig()
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id, config.decoder_start_token_id) == (0, 1, 2, 1)
    assert config.is_encoder_decoder and config.bidirectional and config.teacher_forcing_ratio == 1.0
    assert config.encoder_output_size == 2 * config.encoder_hidden_size == config.decoder_hidden_size
    assert config.target_vocab_size == config.vocab_size
    assert RNNSeq2SeqConfig(decoder_vocab_size=99).target_vocab_size == 99


@pytest.mark.parametrize(
    ("attention_type", "expected"),
    [("bahdanau", False), ("none", False), ("luong_dot", True), ("luong_general", True), ("luong_concat", True),
     ("scaled_dot", True)],
)
def test_input_feeding_defaults_on_for_luong_only(attention_type, expected):
    assert RNNSeq2SeqConfig(attention_type=attention_type).uses_input_feeding is expected
    if expected:
        assert RNNSeq2SeqConfig(attention_type=attention_type, input_feeding=False).uses_input_feeding is False


def test_save_load_round_trip(tmp_path):
    config = RNNSeq2SeqConfig(vocab_size=50, cell_type="lstm", attention_type="luong_general", decoder_vocab_size=40,
                              encoder_layers=2, teacher_forcing_ratio=0.75)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, RNNSeq2SeqConfig)
    assert loaded.to_diff_dict() | {"_name_or_path": ""} == config.to_diff_dict() | {"_name_or_path": ""}


BAD_VALUES = [
    ({"cell_type": "rnn"}, "`cell_type` must be one of ['gru', 'lstm']"),
    ({"attention_type": "multihead"}, "`attention_type` must be one of ['bahdanau', 'luong_dot', 'luong_general'"),
    ({"decoder_init": "mean"},
     "`decoder_init` must be one of ['bridge', 'last', 'zero', 'final_states', 'final_states_bridge', "
     "'final_states_projected', 'last_forward']"),
    ({"decoder_init": "final_states_projected", "encoder_layers": 2},
     "`encoder_layers` (2) must equal `decoder_layers` (1)"),
    ({"output_projection_size": 0}, "output_projection_size"),
    ({"tie_word_embeddings": True, "output_projection_size": 16, "decoder_embedding_size": 512},
     "`decoder_embedding_size` (512) must equal it"),
    ({"decoder_init": "final_states", "encoder_layers": 2}, "`encoder_layers` (2) must equal `decoder_layers` (1)"),
    ({"readout_activation": "relu"}, "`readout_activation` must be one of ['tanh', 'none']"),
    ({"attention_query_bias": True, "attention_type": "luong_dot", "encoder_hidden_size": 256},
     "`attention_query_bias`=True applies to the additive scores"),
    ({"encoder_hidden_size": 0}, "`encoder_hidden_size` must be a positive integer"),
    ({"decoder_hidden_size": -4}, "`decoder_hidden_size` must be a positive integer"),
    ({"encoder_layers": 0}, "`encoder_layers` must be a positive integer"),
    ({"decoder_layers": 0}, "`decoder_layers` must be a positive integer"),
    ({"vocab_size": 0}, "`vocab_size` must be a positive integer"),
    ({"decoder_vocab_size": 0}, "`decoder_vocab_size` must be a positive integer"),
    ({"attention_size": 0}, "`attention_size` must be a positive integer"),
    ({"encoder_embedding_size": 0}, "`encoder_embedding_size` must be a positive integer"),
    ({"dropout": 1.0}, "`dropout` must be a float in [0, 1)"),
    ({"dropout": -0.1}, "`dropout` must be a float in [0, 1)"),
    ({"teacher_forcing_ratio": 1.5}, "`teacher_forcing_ratio` must be a float in [0, 1]"),
    ({"teacher_forcing_ratio": -0.1}, "`teacher_forcing_ratio` must be a float in [0, 1]"),
    ({"rdrop_alpha": -1.0}, "`rdrop_alpha` must be a finite float >= 0, got -1.0"),
    ({"attention_type": "luong_dot", "encoder_hidden_size": 256, "decoder_hidden_size": 256},
     "`attention_type`='luong_dot'"),
    ({"attention_type": "luong_dot", "bidirectional": False, "encoder_hidden_size": 256, "decoder_hidden_size": 512},
     "encoder_hidden_size x 1 directions = 256"),
    ({"decoder_init": "last", "decoder_hidden_size": 100, "attention_type": "bahdanau"}, "'bridge', 'zero'"),
    ({"input_feeding": True, "attention_type": "bahdanau"}, "`input_feeding` applies to the Luong attention types"),
    ({"attention_type": "scaled_dot", "encoder_hidden_size": 256, "decoder_hidden_size": 256},
     "`attention_type`='scaled_dot' scores h_t . h_s, so `decoder_hidden_size` must equal"),
    ({"attention_heads": 0}, "`attention_heads` must be a positive integer"),
    ({"attention_heads": 2, "attention_type": "bahdanau"},
     "`attention_heads`=2 needs a dot-type score, attention_type one of ['luong_dot', 'scaled_dot'], got "
     "attention_type='bahdanau'"),
    ({"attention_heads": 2, "attention_type": "luong_general"}, "got attention_type='luong_general'"),
    ({"attention_heads": 3, "attention_type": "scaled_dot", "encoder_hidden_size": 4},
     "`attention_heads`=3 splits the encoder output size (8) among the heads, so it must divide it; allowed: one of "
     "[1, 2, 4, 8]"),
    ({"tie_word_embeddings": True}, "`decoder_embedding_size` (256) must equal it"),
    ({"eos_token_id": 50, "vocab_size": 20}, "`eos_token_id` must be a token id in [0, 20)"),
    ({"decoder_start_token_id": 30, "vocab_size": 40, "decoder_vocab_size": 20}, "in [0, 20)"),
    ({"num_layers": 2}, "unknown argument(s) ['num_layers']"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD_VALUES, ids=[str(k) for k, _ in BAD_VALUES])
def test_bad_values_raise_naming_field_and_allowed(kwargs, message):
    with pytest.raises(ValueError) as error:
        RNNSeq2SeqConfig(**kwargs)
    assert message in str(error.value)


def test_several_heads_project_the_decoder_state_so_any_size_works():
    config = RNNSeq2SeqConfig(attention_type="scaled_dot", attention_heads=4, encoder_hidden_size=128,
                              decoder_hidden_size=96)
    assert config.attention_heads == 4 and config.uses_input_feeding


def test_luong_dot_accepts_matching_sizes():
    RNNSeq2SeqConfig(attention_type="luong_dot", encoder_hidden_size=128, decoder_hidden_size=256)
    RNNSeq2SeqConfig(attention_type="luong_dot", bidirectional=False, encoder_hidden_size=64, decoder_hidden_size=64)
