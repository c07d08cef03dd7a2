"""TransformerSeq2Seq models, beyond the contract every family meets (test_family_contract.py): the mask found
from the pad id in a forward, eager == sdpa, static == dynamic cache, cross-attention distributions, a
continued generate() reading the decoder mask it is given as BART does, the default generation config,
gradient checkpointing, initialisation, positions, and bad input (all padding, half precision). Tiny configs,
CPU, seeded."""

import pytest
import torch
from transformers import BartConfig, BartForConditionalGeneration

from hf_s2s import (
    TransformerSeq2SeqConfig,
    TransformerSeq2SeqForConditionalGeneration,
)
from hf_s2s.data.synthetic import FIRST_SYMBOL_ID, PAD_ID
from hf_s2s.models.modeling_transformer_seq2seq import sinusoidal_positions
from hf_s2s.models.transformers_compat import output_cache
from tests.helpers import cache_tensors, generate_in_one_and_in_two_calls, single_thread

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

VOCAB = 24
TINY = dict(
    vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, init_std=0.1,
    # untied: a random model with tied embeddings mostly repeats its input token, which makes weak equality tests
    tie_word_embeddings=False,
)
# A second architecture exercising every non-default option: post-LN, learned positions, gelu, unscaled
# embeddings, separate source/target vocabularies, untied output layer.
VARIANT = dict(
    norm_position="post", position_embedding_type="learned", activation_function="gelu", scale_embedding=False,
    decoder_vocab_size=30, share_encoder_decoder_embeddings=False, tie_word_embeddings=False, max_position_embeddings=64,
)


def make_model(seed=0, attn_implementation=None, **overrides):
    torch.manual_seed(seed)
    config = TransformerSeq2SeqConfig(**{**TINY, **overrides})
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    return TransformerSeq2SeqForConditionalGeneration._from_config(config, **kwargs).eval()


def source_batch():
    """Three sources of different lengths, right-padded, each ending with </s> (id 2)."""
    rows = [[5, 9, 13, 7, 21, 11, 2], [8, 6, 2], [17, 4, 10, 12, 2]]
    width = max(map(len, rows))
    input_ids = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])
    return input_ids, (input_ids != PAD_ID).long()


def generate(model, input_ids, attention_mask, **kwargs):
    kwargs = {"max_length": 13, "do_sample": False, **kwargs}
    with torch.no_grad():
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def assert_nontrivial(sequences):
    """Equality tests are only worth something if the model does not emit one constant token."""
    assert len(torch.unique(sequences[:, 1:])) >= 3, sequences


# ---------------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------------


def test_without_attention_mask_the_forward_masks_the_pad_id_as_the_given_mask_does():
    """Teacher forcing, the encoder alone, and a decoding step fed the encoder's output without a mask: each equals
    the same call with the mask; reading the padding (the old behaviour) changes every row that has some."""
    model = make_model()
    input_ids, attention_mask = source_batch()
    decoder_input_ids = torch.tensor([[1, 5, 6], [1, 7, 8], [1, 9, 10]])
    with torch.no_grad():
        masked = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
        inferred = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids)
        read_padding = model(input_ids=input_ids, attention_mask=torch.ones_like(attention_mask),
                             decoder_input_ids=decoder_input_ids)
        encoded = model.get_encoder()(input_ids=input_ids)
        step = model(encoder_outputs=encoded, decoder_input_ids=decoder_input_ids)
    torch.testing.assert_close(inferred.logits, masked.logits)
    torch.testing.assert_close(step.logits, masked.logits)
    torch.testing.assert_close(encoded.last_hidden_state, masked.encoder_last_hidden_state)
    assert torch.equal(encoded.source_mask, attention_mask.bool())
    assert not torch.allclose(read_padding.logits[1:], masked.logits[1:], atol=1e-4)  # rows 1 and 2 are padded


def test_eager_equals_sdpa():
    eager = make_model(attn_implementation="eager")
    sdpa = make_model(attn_implementation="sdpa")
    assert eager.config._attn_implementation == "eager" and sdpa.config._attn_implementation == "sdpa"
    input_ids, attention_mask = source_batch()
    decoder_input_ids = torch.tensor([[1, 5, 6, 7], [1, 8, 2, 0], [1, 9, 9, 3]])
    decoder_attention_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])
    with torch.no_grad():
        logits = [m(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                    decoder_attention_mask=decoder_attention_mask).logits for m in (eager, sdpa)]
    torch.testing.assert_close(logits[0], logits[1], atol=1e-5, rtol=0)
    for num_beams in (1, 4):
        assert torch.equal(generate(eager, input_ids, attention_mask, num_beams=num_beams),
                           generate(sdpa, input_ids, attention_mask, num_beams=num_beams))


@pytest.mark.parametrize("num_beams", [1, 4])
def test_static_cache_equals_dynamic_cache(num_beams):
    model = make_model()
    input_ids, attention_mask = source_batch()
    dynamic = generate(model, input_ids, attention_mask, num_beams=num_beams)
    static = generate(model, input_ids, attention_mask, num_beams=num_beams, cache_implementation="static")
    assert_nontrivial(dynamic)
    assert torch.equal(static, dynamic)


def test_cross_attentions_are_real_distributions_over_the_source():
    model = make_model(attn_implementation="eager")
    input_ids, attention_mask = source_batch()
    out = generate(model, input_ids, attention_mask, max_length=5, output_attentions=True,
                   return_dict_in_generate=True)
    assert len(out.cross_attentions) == out.sequences.shape[1] - 1  # one entry per generated step
    for step in out.cross_attentions:
        assert len(step) == model.config.decoder_layers
        for weights in step:
            assert weights.shape == (3, model.config.decoder_attention_heads, 1, input_ids.shape[1])
            torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
            padding = (attention_mask == 0)[:, None, None, :].expand_as(weights)
            assert (weights[padding] == 0).all()


def bart_like(dtype):
    """A BART of the sizes of ``TINY`` (post-LN and learned positions, like ``VARIANT``), in eval mode."""
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        init_std=0.1, pad_token_id=PAD_ID, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
        forced_eos_token_id=None,
    )
    return BartForConditionalGeneration(config).eval().to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_continued_generate_reads_the_decoder_mask_it_is_given_as_bart_does(dtype):
    """transformers' GenerationTesterMixin.test_generate_continue_from_past_key_values, run on the post-LN
    model with learned positions and a left-padded decoder prompt, found the continued cache up to 2.8e-4 away
    from the one-call cache. Its continued call gets a decoder mask shifted one place against its tokens (the
    start token generate() prepended is not covered, ``tests.helpers.generate_in_one_and_in_two_calls``), so
    the last step attends to other positions than in one call. BART, given the same inputs, differs the same
    way: at the last cached position only, from the second decoder layer on (the first layer's keys and values
    there come from the token and its position alone), in float64 as in float32, so no rounding. With the mask
    covering the start token, both continue exactly as one call."""
    input_ids, attention_mask = source_batch()
    prompt = torch.tensor([[5, 6, 7], [PAD_ID, 8, 9], [PAD_ID, PAD_ID, 10]])  # left-padded, no <s> first
    prompt_mask = (prompt != PAD_ID).long()
    for model in (make_model(**VARIANT).to(dtype), bart_like(dtype)):
        for covers_start in (True, False):
            with single_thread():  # tiny models: more threads only contend
                one_call, _, continued = generate_in_one_and_in_two_calls(
                    model, input_ids, attention_mask, prompt, prompt_mask, mask_covers_start=covers_start
                )
            expected, actual = output_cache(one_call), output_cache(continued)
            if covers_start:
                for a, e in zip(cache_tensors(actual), cache_tensors(expected), strict=True):
                    torch.testing.assert_close(a, e, rtol=0, atol=0)
                continue
            layers = expected.self_attention_cache.layers
            for index, (a, e) in enumerate(zip(cache_tensors(actual), cache_tensors(expected), strict=True)):
                # (B, H, T, d_h); the self-attention cache's layers come first, keys and values of each
                difference = (a - e).abs()
                assert difference[:, :, :-1].max() == 0, (type(model).__name__, index)
                if index < 2 or index >= 2 * len(layers):  # the first layer, and the cross-attention cache
                    assert difference.max() == 0, (type(model).__name__, index)
                else:  # beyond transformers' tolerance (atol 1e-5) for float32
                    assert difference[:, :, -1].max() > 1e-5, (type(model).__name__, index)


def test_default_generation_config_decodes_out_of_the_box():
    model = make_model()
    config = model.generation_config
    assert (config.decoder_start_token_id, config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 1, 2, 0)
    assert config.max_length >= 64
    encoder = model.get_encoder()
    assert isinstance(encoder, torch.nn.Module) and encoder.main_input_name == "input_ids"
    input_ids, attention_mask = source_batch()
    with torch.no_grad():
        sequences = model.generate(input_ids=input_ids, attention_mask=attention_mask)
    assert (sequences[:, 0] == 1).all()


# ---------------------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------------------


def labelled_batch():
    input_ids, attention_mask = source_batch()
    labels = torch.tensor([[7, 21, 11, 13, 9, 5, 2], [6, 8, 2, -100, -100, -100, -100], [12, 10, 4, 17, 2, -100, -100]])
    return input_ids, attention_mask, labels


def test_gradient_checkpointing_gives_the_same_gradients():
    input_ids, attention_mask, labels = labelled_batch()
    grads, attention_calls = [], []
    for checkpointing in (False, True):
        model = make_model(dropout=0.0)
        model.train()
        if checkpointing:
            model.activation_checkpointing_enable()
        calls = []
        model.model.decoder.layers[0].encoder_attn.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        attention_calls.append(len(calls))
    assert attention_calls == [1, 2]  # checkpointing really recomputed the layer in the backward pass
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5, msg=name)


def test_init_weights_covers_every_parameter():
    model = make_model(**VARIANT)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    model.apply(model._init_weights)
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
        assert p.abs().max() <= 1.0, name


# ---------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------


def test_learned_positions_reject_a_source_longer_than_the_table():
    model = make_model(position_embedding_type="learned", max_position_embeddings=8)
    long_source = torch.full((1, 9), 5)
    with pytest.raises(ValueError, match=r"max_position_embeddings=8.*position_embedding_type='sinusoidal'"):
        model(input_ids=long_source, decoder_input_ids=torch.tensor([[1]]))


def test_sinusoidal_positions_extend_beyond_max_position_embeddings():
    model = make_model(max_position_embeddings=8)
    long_source = torch.randint(FIRST_SYMBOL_ID, VOCAB, (1, 20))
    with torch.no_grad():
        logits = model(input_ids=long_source, decoder_input_ids=torch.tensor([[1]])).logits
    assert torch.isfinite(logits).all()
    table = sinusoidal_positions(torch.arange(20), 32)
    # PE(pos, i) = sin(pos * 10000^(-i/16)) in the first half, cos(...) in the second
    assert torch.allclose(table[13, 3], torch.sin(torch.tensor(13 * 10000 ** (-3 / 16))))
    assert torch.allclose(table[13, 16 + 3], torch.cos(torch.tensor(13 * 10000 ** (-3 / 16))))


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_all_padding_row_and_half_precision_give_no_nan(attn_implementation, dtype):
    model = make_model(attn_implementation=attn_implementation).to(dtype)
    input_ids, attention_mask = source_batch()
    input_ids[1], attention_mask[1] = PAD_ID, 0  # a row that is all padding
    decoder_input_ids = torch.tensor([[1, 5, 6], [1, 7, 8], [1, 9, 10]])
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
        sequences = generate(model, input_ids, attention_mask, max_length=5)
    assert torch.isfinite(out.logits.float()).all()
    assert torch.isfinite(out.encoder_last_hidden_state.float()).all()
    assert sequences.shape[0] == 3
