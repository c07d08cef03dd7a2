"""RNN encoder-decoder, beyond the contract every family meets (test_family_contract.py): each attention type's
keys projected once and its scores against torch's kernel, beam cross-attention shapes, assisted decoding refused,
initialisation of missing weights, tied embeddings, the encoder interface, scheduled sampling, and bad inputs (left
padding, empty sources, half precision) for every cell_type x attention_type."""

import itertools

import pytest
import torch
from safetensors.torch import load_file, save_file

from hf_s2s import RNNSeq2SeqConfig, RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel
from hf_s2s.models.attention_rnn_seq2seq import LuongDotAttention, MultiHeadDotAttention, ScaledDotAttention
from tests.helpers import random_tiny_model, single_thread

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

CELLS = ("gru", "lstm")
# Multi-head variants of the dot-type scores, named "type/heads"; scaled_dot/4 also runs the whole target through
# the attention in one call (no input feeding), the others step by step
HEADED = {
    "luong_dot/2": {"attention_type": "luong_dot", "attention_heads": 2},
    "scaled_dot/4": {"attention_type": "scaled_dot", "attention_heads": 4, "input_feeding": False},
}
ATTENTIONS = ("bahdanau", "luong_dot", "luong_general", "luong_concat", "scaled_dot", *HEADED, "none")
COMBOS = list(itertools.product(CELLS, ATTENTIONS))
VOCAB = 13


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on a shared CPU: more threads only add contention (measured 10x slower with 2 threads)."""
    with single_thread():
        yield


def attention_fields(attention_type: str) -> dict:
    """The config fields of an ATTENTIONS entry."""
    return HEADED.get(attention_type, {"attention_type": attention_type})


def tiny_config(cell_type="gru", attention_type="bahdanau", **overrides):
    values = dict(
        vocab_size=VOCAB, encoder_embedding_size=8, decoder_embedding_size=8, encoder_hidden_size=8,
        decoder_hidden_size=16, attention_size=8, encoder_layers=2, decoder_layers=2, dropout=0.0,
        cell_type=cell_type, **attention_fields(attention_type),
    )
    values.update(overrides)
    return RNNSeq2SeqConfig(**values)


def tiny_model(cell_type="gru", attention_type="bahdanau", seed=0, **overrides):
    torch.manual_seed(seed)
    model = RNNSeq2SeqForConditionalGeneration(tiny_config(cell_type, attention_type, **overrides)).eval()
    with torch.no_grad():  # larger weights than the init: random models then make varied, not constant, choices
        for param in model.parameters():
            param.mul_(3.0)
    return model


def batch(*rows):
    """Right-padded input_ids and attention_mask from lists of ids."""
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


SOURCES = ([4, 9, 5, 7, 11, 2], [12, 6, 2], [8, 4, 10, 5, 2], [7, 2])


def generate(model, ids, mask, **kwargs):
    kwargs.setdefault("max_new_tokens", 7)
    return model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True,
                          **kwargs)


@pytest.mark.parametrize("attention_type", ["bahdanau", "luong_general", "luong_concat", "scaled_dot", "scaled_dot/4"])
def test_attention_keys_are_projected_once_per_source(attention_type, monkeypatch):
    model = tiny_model("gru", attention_type)
    calls = []
    project_keys = model.model.decoder.attention.project_keys
    monkeypatch.setattr(model.model.decoder.attention, "project_keys", lambda m: calls.append(m.shape) or project_keys(m))
    ids, mask = batch(*SOURCES)
    generate(model, ids, mask, num_beams=3, max_new_tokens=6, min_new_tokens=6)
    assert calls == [(len(SOURCES) * 3, ids.shape[1], 16)]


@pytest.mark.parametrize("heads", [1, 4])
@pytest.mark.parametrize("scaled", [True, False])
def test_dot_attention_equals_torch_scaled_dot_product_attention(heads, scaled):
    """The scores are Vaswani et al.'s eq. 1 (softmax(QK^T / sqrt(d)) V; scale 1 for Luong's dot): the RNN's dot
    attention modules against torch's own kernel, with the same projections, over a padded batch."""
    torch.manual_seed(0)
    batch_size, steps, length, size = 3, 2, 5, 16
    query, memory = torch.randn(batch_size, steps, size), torch.randn(batch_size, length, size)
    source_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]).bool()
    if heads == 1:
        attention = ScaledDotAttention() if scaled else LuongDotAttention()
        q, k, v = query[:, None], memory[:, None], memory[:, None]  # (B, 1, ., E)
    else:
        attention = MultiHeadDotAttention(size, size, heads, scaled=scaled)
        split = lambda x: x.view(batch_size, -1, heads, size // heads).transpose(1, 2)  # noqa: E731  (B, n, ., d)
        keys, values = attention.key_value_proj(memory).chunk(2, dim=-1)
        q, k, v = split(attention.query_proj(query)), split(keys), split(values)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=source_mask[:, None, None, :], scale=None if scaled else 1.0
    )  # (B, n, T, d)
    with torch.no_grad():
        context, weights = attention(query, attention.project_keys(memory), memory, source_mask)
    assert weights.shape == (batch_size, heads, steps, length)
    torch.testing.assert_close(context, expected.transpose(1, 2).reshape(batch_size, steps, size), atol=1e-5, rtol=0)


def attention_rows(out, num_sources):
    """Stack generate()'s cross_attentions into (B x beams, heads x steps, S)."""
    return torch.cat([step[0] for step in out.cross_attentions], dim=2).flatten(1, 2)


@pytest.mark.parametrize(("attention_type", "heads"), [("bahdanau", 1), ("scaled_dot", 1), ("luong_dot/2", 2)])
def test_beam_cross_attentions_shape(attention_type, heads):
    """One layer; one head, or (B x beams, heads, 1, S) per step with several, each head's weights its own."""
    model = tiny_model("gru", attention_type)
    ids, mask = batch(*SOURCES)
    out = generate(model, ids, mask, num_beams=4, output_attentions=True)
    for step in out.cross_attentions:
        assert len(step) == 1 and step[0].shape == (len(SOURCES) * 4, heads, 1, ids.shape[1])
    if heads > 1:
        assert not torch.allclose(out.cross_attentions[0][0][:, 0], out.cross_attentions[0][0][:, 1])


def test_assisted_decoding_is_refused():
    model = tiny_model()
    ids, mask = batch(*SOURCES)
    with pytest.raises(ValueError, match="stateful"):
        model.generate(input_ids=ids, attention_mask=mask, assistant_model=tiny_model(seed=1), max_new_tokens=3)


# ---- saving and loading -------------------------------------------------------------------------------------


def test_missing_checkpoint_keys_are_initialised(tmp_path):
    """_init_weights covers GRU/LSTM and every other parameter: nothing is left as uninitialised memory."""
    model = tiny_model("gru", "bahdanau")
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    removed = ["model.decoder.rnn.weight_hh_l0", "model.encoder.rnn.weight_ih_l1_reverse", "model.encoder.rnn.bias_hh_l0",
               "model.decoder.attention.energy.weight", "model.decoder.bridge.weight", "model.encoder.embed_tokens.weight"]
    assert set(removed) <= set(weights)
    save_file({k: v for k, v in weights.items() if k not in removed}, tmp_path / "model.safetensors",
              metadata={"format": "pt"})
    loaded = RNNSeq2SeqForConditionalGeneration.from_pretrained(tmp_path)
    state = dict(loaded.named_parameters())
    for name, param in state.items():
        assert torch.isfinite(param).all(), name
    for name in removed:  # initialised by _init_weights: N(0, init_std=1) embeddings at most; never garbage memory
        assert state[name].abs().max() < 6, name
    assert state["model.decoder.rnn.weight_hh_l0"].std() > 0.01  # freshly initialised, not zeros
    assert torch.equal(state["model.decoder.rnn.weight_ih_l0"], weights["model.decoder.rnn.weight_ih_l0"])  # loaded


def test_tied_embeddings_survive_save_load(tmp_path):
    model = tiny_model("gru", "luong_general", tie_word_embeddings=True, decoder_embedding_size=16)
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
    model.save_pretrained(tmp_path)
    loaded = RNNSeq2SeqForConditionalGeneration.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.model.decoder.embed_tokens.weight
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight)


def test_base_model_and_encoder_interface():
    model = tiny_model("lstm", "luong_dot")
    encoder = model.get_encoder()
    assert isinstance(encoder, torch.nn.Module) and encoder.main_input_name == "input_ids"
    ids, mask = batch(*SOURCES)
    memory = encoder(input_ids=ids, attention_mask=mask, output_attentions=False, return_dict=True).last_hidden_state
    assert memory.shape == (4, ids.shape[1], 16)
    assert (memory[mask == 0] == 0).all()
    out = model.model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.ones(4, 3, dtype=torch.long))
    assert out.last_hidden_state.shape == (4, 3, 16)


# ---- training -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention_type", ["bahdanau", "luong_general", "scaled_dot/4", "none"])
def test_scheduled_sampling(attention_type):
    ids, mask = batch(*SOURCES)
    labels = torch.tensor([[5, 6, 7, 8, 2], [8, 2, -100, -100, -100], [9, 10, 11, 12, 2], [4, 2, -100, -100, -100]])
    teacher = tiny_model("gru", attention_type).train()
    never = tiny_model("gru", attention_type, teacher_forcing_ratio=0.0).train()
    half = tiny_model("gru", attention_type, teacher_forcing_ratio=0.5).train()
    # decoder inputs rather than labels: a training forward with labels returns the loss without logits
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=teacher.prepare_decoder_input_ids_from_labels(labels))
    tf_logits = teacher(**inputs).logits
    torch.manual_seed(0)
    assert not torch.allclose(half(**inputs).logits, tf_logits)
    # ratio 0: every input after the start token is the model's own argmax, i.e. greedy decoding's logits
    own = never(**inputs).logits
    greedy_inputs = torch.cat([torch.ones(4, 1, dtype=torch.long), own[:, :-1].argmax(-1)], dim=1)
    with torch.no_grad():
        replay = teacher(input_ids=ids, attention_mask=mask, decoder_input_ids=greedy_inputs).logits
    torch.testing.assert_close(own, replay, atol=1e-5, rtol=0)
    # only in training mode: in eval the model is teacher-forced whatever the ratio
    with torch.no_grad():
        torch.testing.assert_close(half.eval()(**inputs).logits, teacher.eval()(**inputs).logits)


REVERSAL_RECIPES = {  # tiny GRU models; "none" (no attention) needs more data and epochs
    "bahdanau": dict(num_train=1500, epochs=3),
    "luong_dot": dict(num_train=1500, epochs=3),
    "luong_general": dict(num_train=1500, epochs=3),
    "luong_concat": dict(num_train=1500, epochs=3),
    "scaled_dot": dict(num_train=1500, epochs=3),
    "luong_dot/2": dict(num_train=1500, epochs=3),
    "scaled_dot/4": dict(num_train=1500, epochs=3),
    "none": dict(num_train=3000, epochs=8),
}


# ---- bad inputs ---------------------------------------------------------------------------------------------


def test_left_padding_is_refused():
    model = tiny_model()
    ids, mask = batch(*SOURCES)
    with pytest.raises(ValueError, match="right-padded"):
        model(input_ids=ids, attention_mask=mask.flip(1), decoder_input_ids=ids[:, :1])


@pytest.mark.parametrize(("cell_type", "attention_type"), COMBOS)
def test_all_padding_and_zero_length_sources_give_no_nan(cell_type, attention_type):
    model = tiny_model(cell_type, attention_type)
    ids, mask = batch([4, 5, 2], [0, 0, 0])
    mask[1] = 0
    out = generate(model, ids, mask, output_attentions=attention_type != "none")
    assert all(torch.isfinite(s).any(-1).all() for s in out.scores)
    if attention_type != "none":
        assert (attention_rows(out, 2)[1] == 0).all()  # nothing to attend to: zero weights, no NaN
    empty = torch.zeros(2, 0, dtype=torch.long)
    logits = model(input_ids=empty, attention_mask=empty, decoder_input_ids=torch.ones(2, 3, dtype=torch.long)).logits
    assert torch.isfinite(logits).all()
    assert generate(model, empty, empty, num_beams=2).sequences.shape[0] == 2
    # the encoder's output handed back as a plain tuple: the mask comes from the inputs and must fit its one step
    memory = model.get_encoder()(input_ids=empty, attention_mask=empty).last_hidden_state  # (2, 1, E)
    again = model(input_ids=empty, attention_mask=empty, encoder_outputs=(memory,),
                  decoder_input_ids=torch.ones(2, 3, dtype=torch.long)).logits
    torch.testing.assert_close(again, logits, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("attention_type", ATTENTIONS)
def test_half_precision_gives_no_nan(dtype, attention_type):
    model = tiny_model("lstm", attention_type).to(dtype)
    ids, mask = batch(*SOURCES, [0, 0])
    mask[-1] = 0
    labels = torch.tensor([[5, 6, 2]] * 5)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert out.logits.dtype == dtype and torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    generated = model.generate(input_ids=ids, attention_mask=mask, num_beams=2, max_new_tokens=4)
    assert generated.shape[0] == 5


def test_decoder_attention_mask_is_accepted_as_transformers_models_accept_it():
    """transformers' seq2seq inputs include decoder_attention_mask (its common model tests pass one): the RNN takes
    it, and right-padded targets give the same loss and the same logits at real positions with or without it."""
    model = random_tiny_model("rnn_seq2seq", vocab_size=30)
    input_ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    labels = torch.tensor([[10, 11, 12, 2], [13, 2, -100, -100]])
    decoder_attention_mask = (labels != -100).long()
    with_mask = model(input_ids=input_ids, labels=labels, decoder_attention_mask=decoder_attention_mask)
    without = model(input_ids=input_ids, labels=labels)
    torch.testing.assert_close(with_mask.loss, without.loss, rtol=0, atol=0)
    torch.testing.assert_close(with_mask.logits, without.logits, rtol=0, atol=0)
    base = RNNSeq2SeqModel(model.config).eval()
    base(input_ids=input_ids, decoder_input_ids=input_ids, decoder_attention_mask=decoder_attention_mask)
