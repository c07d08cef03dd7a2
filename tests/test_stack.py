"""Both families with the rest of the transformers stack: generation length defaults, quantization, device maps
with offloading, attention backends and the static cache, inputs_embeds, gradient checkpointing and standalone
decoders. Tiny random models; every property is an equality with the plain model where one exists."""

import logging
import warnings

import pytest
import torch
from helpers import random_tiny_model

from hf_s2s.modeling_common import DEFAULT_GENERATION_MAX_LENGTH

FAMILIES = ("rnn_seq2seq", "transformer_seq2seq")
VOCAB = 23


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def source_batch():
    input_ids = torch.tensor([[5, 9, 4, 7, 2], [8, 3, 6, 2, 0]])
    return input_ids, (input_ids != 0).long()


def generate_quietly(model, caplog, **kwargs):
    """generate() on the source batch; returns the sequences and every warning and log record it raised."""
    input_ids, attention_mask = source_batch()
    caplog.clear()
    transformers_logger = logging.getLogger("transformers")  # does not propagate to the root logger caplog watches
    transformers_logger.addHandler(caplog.handler)
    try:
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
            warnings.simplefilter("always")
            with torch.no_grad():
                sequences = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, **kwargs)
    finally:
        transformers_logger.removeHandler(caplog.handler)
    messages = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
    return sequences, messages


@pytest.mark.parametrize("model_type", FAMILIES)
def test_generation_length_default_is_shipped_and_a_given_length_raises_no_warning(model_type, caplog, tmp_path):
    model = random_tiny_model(model_type, VOCAB, eos_token_id=VOCAB - 1)  # an id random models rarely pick
    assert model.generation_config.max_length == DEFAULT_GENERATION_MAX_LENGTH
    sequences, messages = generate_quietly(model, caplog)
    assert sequences.shape[1] > 21, "stopped at transformers' generic 20 new tokens"
    assert not [m for m in messages if "max_length" in m], messages
    for length in ({"max_new_tokens": 4}, {"max_length": 6}):
        sequences, messages = generate_quietly(model, caplog, **length)
        assert sequences.shape[1] == 5 if "max_new_tokens" in length else 6
        assert not [m for m in messages if "max_length" in m or "max_new_tokens" in m], messages
    model.save_pretrained(tmp_path)
    assert type(model).from_pretrained(tmp_path).generation_config.max_length == DEFAULT_GENERATION_MAX_LENGTH
