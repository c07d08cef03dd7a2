"""The compiled decoding path: ``generate(cache_implementation="static")`` with a compile config makes transformers
compile each model's decoding step (torch.compile; CUDA graphs on a GPU). The compiled steps must give exactly the
eager tokens, compile once per shape (no recompilation as the output grows), and really run compiled.

transformers compiles on accelerators only, unless the compile config's ``_compile_all_devices`` is set, which is
how this CPU-only test reaches the same path a GPU takes.
"""

import pytest
import torch

from hf_s2s.benchmark.generation import compile_config_on_every_device
from hf_s2s.models.transformers_compat import output_cache
from tests.helpers import random_tiny_model

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

VOCAB, PAD, START, EOS = 40, 0, 1, 2
MODELS = {
    "Transformer post-LN": ("transformer_seq2seq", {}),
    "Transformer pre-LN, learned positions": ("transformer_seq2seq",
                                              {"norm_position": "pre", "position_embedding_type": "learned"}),
    "GRU + Bahdanau, 2 decoder layers": ("rnn_seq2seq", {"cell_type": "gru", "attention_type": "bahdanau",
                                                          "decoder_layers": 2}),
    "LSTM + Luong general, input feeding": ("rnn_seq2seq", {"cell_type": "lstm", "attention_type": "luong_general",
                                                             "input_feeding": True}),
    "GRU + scaled dot, 4 heads": ("rnn_seq2seq", {"cell_type": "gru", "attention_type": "scaled_dot",
                                                  "attention_heads": 4}),
}


def padded_sources():
    torch.manual_seed(1)
    input_ids = torch.randint(3, VOCAB, (3, 7))
    input_ids[1, 4:] = PAD
    input_ids[2, 2:] = PAD
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_greedy_decoding_equals_eager_and_compiles_once(name):
    model_type, overrides = MODELS[name]
    model = random_tiny_model(model_type, VOCAB, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=START,
                              **overrides)
    torch._dynamo.reset()
    inputs = padded_sources()
    settings = {"max_new_tokens": 12, "min_new_tokens": 12, "num_beams": 1, "do_sample": False}
    eager = model.generate(**inputs, **settings)
    compile_config = compile_config_on_every_device()  # compile on the CPU as on a GPU
    with torch._dynamo.config.patch(error_on_recompile=True):  # a token count the step specialises on would fail
        output = model.generate(**inputs, **settings, cache_implementation="static", compile_config=compile_config,
                                return_dict_in_generate=True)
    assert getattr(model, "_compiled_call", None) is not None, "generate() did not compile the decoding step"
    assert output_cache(output).is_compileable
    assert torch.equal(output.sequences, eager), (output.sequences, eager)
