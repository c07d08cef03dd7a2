"""RNN encoder-decoder: equality properties for every cell_type x attention_type (cached == uncached generation,
teacher forcing == step-by-step decoding, padded batch == single sentences), a beam test with teeth, save/load and
the remote-code folder in a fresh process, training on the reversal task, loss and bad inputs."""

import itertools
import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForSeq2SeqLM

from hf_s2s import RNNSeq2SeqConfig, RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel
from hf_s2s.models.attention_rnn_seq2seq import LuongDotAttention, MultiHeadDotAttention, ScaledDotAttention
from hf_s2s.models.modeling_rnn_seq2seq import RNNSeq2SeqCache
from hf_s2s.models.transformers_compat import output_cache
from tests.helpers import run_without_hf_s2s, single_thread, train_reversal

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


def assert_cached_equals_uncached(model, ids, mask, **kwargs):
    cached = generate(model, ids, mask, use_cache=True, **kwargs)
    uncached = generate(model, ids, mask, use_cache=False, **kwargs)
    assert cached.sequences.tolist() == uncached.sequences.tolist()
    if "sequences_scores" in cached:
        torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("cell_type", "attention_type"), COMBOS)
def test_cached_generation_equals_uncached(cell_type, attention_type):
    model = tiny_model(cell_type, attention_type)
    ids, mask = batch(*SOURCES)
    assert_cached_equals_uncached(model, ids, mask)
    assert_cached_equals_uncached(model, ids, mask, num_beams=4, num_return_sequences=3, length_penalty=0.6)
    assert_cached_equals_uncached(model, ids, mask, num_beams=4, no_repeat_ngram_size=2)
    torch.manual_seed(1)
    sampled = generate(model, ids, mask, do_sample=True, top_k=5).sequences
    torch.manual_seed(1)
    assert generate(model, ids, mask, do_sample=True, top_k=5, use_cache=False).sequences.tolist() == sampled.tolist()


def test_generation_is_not_degenerate():
    """Guards the tests above: the random model must make varied choices, or equalities would hold trivially."""
    model = tiny_model("gru", "bahdanau")
    ids, mask = batch(*SOURCES)
    sequences = generate(model, ids, mask, num_beams=4, num_return_sequences=4).sequences
    assert len({tuple(s) for s in sequences.tolist()}) >= 12
    assert len(set(sequences[:, 1:].flatten().tolist())) >= 5


def test_n_best_and_no_repeat_ngram():
    model = tiny_model("lstm", "luong_general")
    ids, mask = batch(*SOURCES)
    out = generate(model, ids, mask, num_beams=4, num_return_sequences=3)
    assert out.sequences.shape[0] == 3 * len(SOURCES)
    scores = out.sequences_scores.view(len(SOURCES), 3)
    assert (scores[:, :-1] >= scores[:, 1:]).all()
    for row in generate(model, ids, mask, num_beams=4, no_repeat_ngram_size=2, max_new_tokens=12).sequences.tolist():
        row = row[: row.index(2) + 1] if 2 in row else row  # up to the first </s>
        bigrams = list(zip(row, row[1:], strict=False))
        assert len(bigrams) == len(set(bigrams))


@pytest.mark.parametrize(("cell_type", "attention_type"), COMBOS)
def test_teacher_forced_logits_equal_step_by_step(cell_type, attention_type):
    model = tiny_model(cell_type, attention_type)
    ids, mask = batch(*SOURCES)
    decoder_input_ids = torch.tensor([[1, 5, 6, 7, 8, 9], [1, 12, 11, 10, 2, 0], [1, 4, 4, 4, 4, 4], [1, 3, 2, 0, 0, 0]])
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids, use_cache=False).logits
        cache, steps = None, []
        for t in range(decoder_input_ids.shape[1]):
            out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids[:, t : t + 1],
                        cache=cache, use_cache=True)
            cache = output_cache(out)
            steps.append(out.logits)
    assert isinstance(cache, RNNSeq2SeqCache) and cache.get_seq_length() == decoder_input_ids.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    with torch.no_grad():  # a prefix of several tokens, then single steps, from precomputed encoder outputs
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        head = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=decoder_input_ids[:, :4])
        tail = model(decoder_input_ids=decoder_input_ids[:, 4:], cache=output_cache(head))
    torch.testing.assert_close(torch.cat([head.logits, tail.logits], dim=1), full, atol=1e-5, rtol=0)


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


@pytest.mark.parametrize(("cell_type", "attention_type"), COMBOS)
def test_padded_batch_equals_each_sentence_alone(cell_type, attention_type):
    model = tiny_model(cell_type, attention_type)
    ids, mask = batch(*SOURCES)
    kwargs = dict(output_attentions=True, max_new_tokens=6, min_new_tokens=6)  # same length for every row
    batched = generate(model, ids, mask, **kwargs)
    batched_beam = generate(model, ids, mask, num_beams=3, **kwargs).sequences
    for i, source in enumerate(SOURCES):
        alone = generate(model, *batch(source), **kwargs)
        assert alone.sequences[0].tolist() == batched.sequences[i].tolist()
        alone_beam = generate(model, *batch(source), num_beams=3, **kwargs).sequences
        assert alone_beam[0].tolist() == batched_beam[i].tolist()
        if attention_type == "none":
            assert alone.cross_attentions[0] is None
            continue
        weights = attention_rows(batched, len(SOURCES))[i]  # (heads x steps, S_padded)
        rows = model.config.attention_heads * 6
        assert weights.shape == (rows, ids.shape[1])
        torch.testing.assert_close(weights[:, : len(source)], attention_rows(alone, 1)[0], atol=1e-5, rtol=0)
        assert (weights[:, len(source) :] == 0).all()  # exactly zero on padding
        torch.testing.assert_close(weights.sum(-1), torch.ones(rows), atol=1e-6, rtol=0)


@pytest.mark.parametrize("attention_type", ["bahdanau", "luong_general"])
def test_right_padded_batch_without_attention_mask_equals_each_sentence_alone(attention_type):
    """Without attention_mask the encoder infers the mask from the pad id; the decoder must attend with that same
    mask (it used all ones and read the padding, issue 11 item 6)."""
    model = tiny_model("lstm", attention_type)
    ids, _ = batch(*SOURCES)
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, output_attentions=True)
    for num_beams in (1, 3):
        batched = model.generate(input_ids=ids, num_beams=num_beams, return_dict_in_generate=True,
                                 output_scores=True, **kwargs)
        for i, source in enumerate(SOURCES):
            alone = model.generate(input_ids=torch.tensor([source]), num_beams=num_beams,
                                   return_dict_in_generate=True, output_scores=True, **kwargs)
            assert alone.sequences[0].tolist() == batched.sequences[i].tolist()
            if num_beams == 1:
                step_scores = torch.stack([s[i] for s in batched.scores])  # (steps, V)
                torch.testing.assert_close(step_scores, torch.cat(alone.scores), atol=1e-5, rtol=0)
                weights = attention_rows(batched, len(SOURCES))[i]  # (steps, S_padded)
                assert (weights[:, len(source) :] == 0).all()


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


@pytest.mark.parametrize(
    "broken_reorder",
    [lambda self, beam_idx: None, lambda self, beam_idx: self._map(lambda t: t.flip(0))],
    ids=["no-op", "reversed"],
)
def test_broken_beam_reorder_is_detected(monkeypatch, broken_reorder):
    """The beam equality check has teeth: a cache that reorders wrongly makes it fail."""
    model = tiny_model("gru", "bahdanau")
    ids, mask = batch(*SOURCES)
    assert_cached_equals_uncached(model, ids, mask, num_beams=4)  # passes with the real reorder
    monkeypatch.setattr(RNNSeq2SeqCache, "reorder_cache", broken_reorder)
    with pytest.raises(AssertionError):
        assert_cached_equals_uncached(model, ids, mask, num_beams=4)


def test_assisted_decoding_is_refused():
    model = tiny_model()
    ids, mask = batch(*SOURCES)
    with pytest.raises(ValueError, match="stateful"):
        model.generate(input_ids=ids, attention_mask=mask, assistant_model=tiny_model(seed=1), max_new_tokens=3)


# ---- saving and loading -------------------------------------------------------------------------------------


def logits_and_generation(model, ids, mask):
    decoder_input_ids = torch.tensor([[1, 5, 6, 7]] * ids.shape[0])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
    return logits, model.generate(input_ids=ids, attention_mask=mask, num_beams=3, max_new_tokens=6)


@pytest.mark.parametrize(("cell_type", "attention_type"), [("lstm", "luong_concat"), ("gru", "scaled_dot/4")])
def test_save_load_and_remote_code_in_fresh_process(cell_type, attention_type, tmp_path):
    model = tiny_model(cell_type, attention_type, decoder_vocab_size=11)
    ids, mask = batch(*SOURCES)
    logits, generated = logits_and_generation(model, ids, mask)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    files = {p.name for p in folder.iterdir()}
    assert {"model.safetensors", "generation_config.json", "config.json", "configuration_rnn_seq2seq.py",
            "modeling_rnn_seq2seq.py", "attention_rnn_seq2seq.py", "config_checks.py", "modeling_common.py"} <= files
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_rnn_seq2seq.RNNSeq2SeqConfig",
        "AutoModel": "modeling_rnn_seq2seq.RNNSeq2SeqModel",
        "AutoModelForSeq2SeqLM": "modeling_rnn_seq2seq.RNNSeq2SeqForConditionalGeneration",
    }
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (generation["pad_token_id"], generation["bos_token_id"], generation["eos_token_id"],
            generation["decoder_start_token_id"]) == (0, 1, 2, 1)

    loaded = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    assert type(loaded) is RNNSeq2SeqForConditionalGeneration
    loaded_logits, loaded_generated = logits_and_generation(loaded, ids, mask)
    # same weights; loaded tensors may sit at other memory alignments, so kernels may differ in the last ulp
    torch.testing.assert_close(loaded_logits, logits, atol=1e-6, rtol=0)
    assert torch.equal(loaded_generated, generated)
    assert type(AutoModel.from_pretrained(folder)) is RNNSeq2SeqModel

    script = f"""
        import json, torch
        from transformers import AutoModel, AutoModelForSeq2SeqLM
        torch.set_num_threads(1)
        folder = {str(folder)!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        base = AutoModel.from_pretrained(folder, trust_remote_code=True)
        ids, mask = torch.tensor({ids.tolist()}), torch.tensor({mask.tolist()})
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.tensor([[1, 5, 6, 7]] * 4)).logits
        generated = model.generate(input_ids=ids, attention_mask=mask, num_beams=3, max_new_tokens=6)
        print(json.dumps({{"logits": logits.tolist(), "generated": generated.tolist(),
                           "classes": [type(model).__name__, type(base).__name__],
                           "module": type(model).__module__}}))
    """
    fresh = run_without_hf_s2s(script, cwd=tmp_path)
    assert fresh["classes"] == ["RNNSeq2SeqForConditionalGeneration", "RNNSeq2SeqModel"]
    assert not fresh["module"].startswith("hf_s2s")
    torch.testing.assert_close(torch.tensor(fresh["logits"]), logits, atol=1e-6, rtol=0)
    assert fresh["generated"] == generated.tolist()


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


def test_loss_with_num_items_in_batch_is_the_token_mean():
    model = tiny_model("gru", "bahdanau")
    ids, mask = batch(*SOURCES)
    labels = torch.tensor([[5, 6, 7, 2], [8, 2, -100, -100], [9, 10, 11, 2], [4, 2, -100, -100]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    expected = torch.nn.functional.cross_entropy(out.logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    # Two halves of an accumulated batch, each divided by the whole batch's token count, add up to the mean.
    total = (labels != -100).sum()
    halves = [model(input_ids=ids[s], attention_mask=mask[s], labels=labels[s], num_items_in_batch=total).loss
              for s in (slice(0, 2), slice(2, 4))]
    torch.testing.assert_close(halves[0] + halves[1], expected)
    # labels alone -> decoder inputs are labels shifted right behind the start token
    explicit = model(input_ids=ids, attention_mask=mask, labels=labels,
                     decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels))
    torch.testing.assert_close(explicit.loss, out.loss)
    assert model.prepare_decoder_input_ids_from_labels(labels)[1].tolist() == [1, 8, 2, 0]


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


@pytest.mark.parametrize("attention_type", ATTENTIONS)
def test_learns_reversal_with_seq2seq_trainer(attention_type, tmp_path):
    torch.manual_seed(0)
    config = RNNSeq2SeqConfig(
        vocab_size=12, encoder_embedding_size=32, decoder_embedding_size=32, encoder_hidden_size=32,
        decoder_hidden_size=64, attention_size=32, **attention_fields(attention_type), dropout=0.0,
    )
    model = RNNSeq2SeqForConditionalGeneration(config)
    assert train_reversal(model, tmp_path, learning_rate=1e-2, **REVERSAL_RECIPES[attention_type]) >= 0.9


# ---- bad inputs ---------------------------------------------------------------------------------------------


def test_token_ids_outside_vocabulary_are_clear_errors():
    model = tiny_model(decoder_vocab_size=7)
    ids, mask = batch(*SOURCES)
    with pytest.raises(ValueError, match=r"`input_ids` holds token id 13, outside the model's vocabulary \[0, 13\)"):
        model(input_ids=ids.clamp(max=12) + (ids == 12).long(), attention_mask=mask, decoder_input_ids=torch.ones(4, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`decoder_input_ids` holds token id 9, outside .* \[0, 7\)"):
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.tensor([[1, 9]] * 4))
    with pytest.raises(ValueError, match=r"`labels` holds token id -5"):
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([[1, -5]] * 4))


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
    from tests.helpers import random_tiny_model

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
