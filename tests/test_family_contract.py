"""The contract every model family in the registry (``hf_s2s.models.families.FAMILIES``) meets, one test per
property, parametrized over the families and, where an architecture option changes the code path, over each
family's variants:

- decoding: cached == uncached (greedy, beam, n-best, no-repeat, sampling), teacher forcing == step by step,
  two generate() calls continuing from a returned cache == one call, a padded batch == each sentence alone
  (with the attention mask and with the mask found from the pad id), ranked n-best led by the best beam,
  seeded sampling, no-repeat n-grams;
- saving: saved == loaded, and the saved folder loads and decodes the same without hf_s2s (remote code);
- forward: tuples for ``return_dict=False``, encoder outputs given as a tuple, unknown keywords ignored, the
  cache under both names, ordinary logits with labels, clear errors for token ids outside the vocabulary;
- training: the loss is the token mean (halves of an accumulated batch add up), label smoothing in the model equals
  Trainer's, the padding-free path gives the padded gradients, and the reversal task is learnt.

A family added to the registry must add its variants to ``VARIANTS`` (checked below). What only one family has
(the RNN's attention types and scheduled sampling, the Transformer's static cache and positions) stays in
test_modeling_rnn_seq2seq.py and test_modeling_transformer_seq2seq.py."""

import json
from contextlib import contextmanager

import pytest
import torch
from transformers import AutoModel, AutoModelForSeq2SeqLM
from transformers.trainer_pt_utils import LabelSmoother

from hf_s2s.data.synthetic import FIRST_SYMBOL_ID
from hf_s2s.models.families import FAMILIES
from hf_s2s.models.modeling_common import seq2seq_loss
from hf_s2s.models.transformers_compat import CACHE_NAME, CACHE_NAMES, output_cache
from tests.helpers import (
    cache_tensors,
    decoder_inputs,
    generate_in_one_and_in_two_calls,
    labelled_batch,
    random_tiny_model,
    run_without_hf_s2s,
    single_thread,
    train_reversal,
)

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

PAD, START, EOS = 0, 1, 2

# ------------------------------------------------------------------------------------------ the families' cases

# Two-layer tiny models of each family: layers stacked, so a cache or a mask that goes wrong in a second layer shows.
RNN = dict(vocab_size=13, encoder_embedding_size=8, decoder_embedding_size=8, encoder_hidden_size=8,
           decoder_hidden_size=16, attention_size=8, encoder_layers=2, decoder_layers=2, dropout=0.0)
# untied: a random Transformer with tied embeddings mostly repeats its input token, which weakens equality tests
TRANSFORMER = dict(vocab_size=24, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0,
                   tie_word_embeddings=False)
# Multi-head dot-type RNN attention; scaled_dot/4 also runs the whole target through the attention in one call
# (no input feeding), the others step by step.
RNN_ATTENTIONS = {
    "bahdanau": {}, "luong_dot": {}, "luong_general": {}, "luong_concat": {}, "scaled_dot": {},
    "luong_dot/2": {"attention_type": "luong_dot", "attention_heads": 2},
    "scaled_dot/4": {"attention_type": "scaled_dot", "attention_heads": 4, "input_feeding": False},
    "none": {},
}


def rnn_variant(cell_type: str, attention: str, **overrides) -> dict:
    return {**RNN, "cell_type": cell_type, "attention_type": attention, **RNN_ATTENTIONS[attention], **overrides}


# Every family's variants: the config fields of each, over the family's defaults. Each code path an option selects
# is a variant: every RNN cell x attention type; the Transformer's defaults (pre-LN, sinusoidal, shared vocabulary)
# and the variant with every other option (post-LN, learned positions, gelu, unscaled embeddings, separate source
# and target vocabularies).
VARIANTS = {
    "transformer_seq2seq": {
        "pre_ln_default": TRANSFORMER,
        "post_ln_variant": {**TRANSFORMER, "norm_position": "post", "position_embedding_type": "learned",
                            "activation_function": "gelu", "scale_embedding": False, "decoder_vocab_size": 30,
                            "share_encoder_decoder_embeddings": False, "max_position_embeddings": 64},
    },
    "rnn_seq2seq": {f"{cell}-{attention}": rnn_variant(cell, attention)
                    for cell in ("gru", "lstm") for attention in RNN_ATTENTIONS},
}
# The variant a test of one case per family uses
PRIMARY = {"transformer_seq2seq": "pre_ln_default", "rnn_seq2seq": "gru-bahdanau"}
# Saved folders: a separate target vocabulary (so a mix-up of the two sides shows) and, for the Transformer, tied
# output embeddings (the one tie a load could silently break)
SAVED = {
    "transformer_seq2seq": {"tied": {**TRANSFORMER, "tie_word_embeddings": True},
                            "post_ln_variant": VARIANTS["transformer_seq2seq"]["post_ln_variant"]},
    "rnn_seq2seq": {"lstm-luong_concat": rnn_variant("lstm", "luong_concat", decoder_vocab_size=11),
                    "gru-scaled_dot/4": rnn_variant("gru", "scaled_dot/4", decoder_vocab_size=11)},
}
# Separate source and target vocabularies: an id checked against the wrong side shows
SEPARATE_VOCABULARIES = {"transformer_seq2seq": VARIANTS["transformer_seq2seq"]["post_ln_variant"],
                         "rnn_seq2seq": rnn_variant("gru", "bahdanau", decoder_vocab_size=7)}
# The reversal task through Seq2SeqTrainer: (config fields, train_reversal arguments, exact match to reach). Tiny GRUs learn it with
# every attention type ("none" needs more data and epochs); the Transformer shows a sudden transition (loss stuck
# near ln 8 for ~400 steps, then falling): lr 1e-3 and ~940 steps put it safely past it.
_RNN_REVERSAL = dict(vocab_size=FIRST_SYMBOL_ID + 8, encoder_embedding_size=32, decoder_embedding_size=32,
                     encoder_hidden_size=32, decoder_hidden_size=64, attention_size=32, dropout=0.0)
REVERSAL = {
    "transformer_seq2seq": {"pre_ln_default": (
        dict(vocab_size=FIRST_SYMBOL_ID + 8, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, dropout=0.0),
        dict(num_train=3000, epochs=10, learning_rate=1e-3), 0.95)},
    "rnn_seq2seq": {attention: (
        {**_RNN_REVERSAL, "attention_type": attention, **RNN_ATTENTIONS[attention]},
        dict(num_train=3000, epochs=8, learning_rate=1e-2) if attention == "none"
        else dict(num_train=1500, epochs=3, learning_rate=1e-2), 0.9) for attention in RNN_ATTENTIONS},
}


def cases(table: dict) -> list:
    """pytest parameters (model_type, fields) of every registered family's entries in ``table``."""
    return [pytest.param(model_type, fields, id=f"{model_type}-{name}")
            for model_type in FAMILIES for name, fields in table.get(model_type, {}).items()]


def per_family(table: dict) -> list:
    return [pytest.param(model_type, table[model_type], id=model_type) for model_type in FAMILIES if model_type in table]


EVERY_VARIANT = pytest.mark.parametrize(("model_type", "fields"), cases(VARIANTS))
PRIMARY_VARIANT = pytest.mark.parametrize(
    ("model_type", "fields"), per_family({t: VARIANTS[t][name] for t, name in PRIMARY.items()}))


def test_every_family_in_the_registry_has_its_cases():
    """A new family is not covered by this contract until it declares its variants here."""
    for table in (VARIANTS, PRIMARY, SAVED, SEPARATE_VOCABULARIES, REVERSAL):
        assert set(table) == set(FAMILIES)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on a shared CPU: more threads only add contention (measured 10x slower with 2 threads)."""
    with single_thread():
        yield


def make_model(model_type, fields, seed=0, **overrides):
    """A random tiny model of the family (every matrix redrawn so its choices vary), in eval mode."""
    return random_tiny_model(model_type, seed=seed, **{**fields, **overrides})


def batch(*rows):
    """Right-padded input_ids and attention_mask from lists of ids."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return ids, (ids != PAD).long()


SOURCES = ([4, 9, 5, 7, 11, 2], [12, 6, 2], [8, 4, 10, 5, 2], [7, 2])
# teacher-forced decoder inputs for SOURCES: start token, then ids of every target vocabulary here (< 11)
DECODER_INPUT_IDS = torch.tensor([[1, 5, 6, 7, 8, 9], [1, 10, 9, 8, 2, 0], [1, 4, 4, 4, 4, 4], [1, 3, 2, 0, 0, 0]])


def generate(model, ids, mask, **kwargs):
    kwargs.setdefault("max_new_tokens", 7)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True,
                              **kwargs)


def assert_varied(sequences):
    """Equality tests are only worth something if the model does not emit one constant token."""
    assert len(torch.unique(sequences[:, 1:])) >= 3, sequences


# ----------------------------------------------------------------------------------------------------- decoding


def test_generation_is_not_degenerate():
    """Guards the equalities below: random models of every family make varied choices, or they would hold
    trivially."""
    for model_type, name in PRIMARY.items():
        model = make_model(model_type, VARIANTS[model_type][name])
        sequences = generate(model, *batch(*SOURCES), num_beams=4, num_return_sequences=4).sequences
        assert len({tuple(s) for s in sequences.tolist()}) >= 12, model_type
        assert len(set(sequences[:, 1:].flatten().tolist())) >= 5, model_type


def assert_cached_equals_uncached(model, ids, mask, **kwargs):
    cached = generate(model, ids, mask, use_cache=True, **kwargs)
    uncached = generate(model, ids, mask, use_cache=False, **kwargs)
    assert cached.sequences.tolist() == uncached.sequences.tolist()
    if "sequences_scores" in cached:
        torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, atol=1e-5, rtol=1e-5)
    return cached.sequences


@EVERY_VARIANT
def test_cached_generation_equals_uncached(model_type, fields):
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    assert_varied(assert_cached_equals_uncached(model, ids, mask))
    assert_cached_equals_uncached(model, ids, mask, num_beams=4, num_return_sequences=3, length_penalty=0.6)
    assert_cached_equals_uncached(model, ids, mask, num_beams=4, no_repeat_ngram_size=2)
    torch.manual_seed(1)
    sampled = generate(model, ids, mask, do_sample=True, top_k=5).sequences
    torch.manual_seed(1)
    assert generate(model, ids, mask, do_sample=True, top_k=5, use_cache=False).sequences.tolist() == sampled.tolist()


@PRIMARY_VARIANT
@pytest.mark.parametrize("broken", ["no-op", "reversed"])
def test_a_broken_beam_reorder_is_detected(model_type, fields, broken, monkeypatch):
    """The beam equality check has teeth for every family: a cache that reorders its beams wrongly makes it fail."""
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    assert_cached_equals_uncached(model, ids, mask, num_beams=4)  # passes with the real reorder
    # beam search reorders through the model's _reorder_cache (every family has one), as transformers calls it
    reorder = model._reorder_cache
    monkeypatch.setattr(model, "_reorder_cache", (lambda cache, beam_idx: cache) if broken == "no-op"
                        else (lambda cache, beam_idx: reorder(cache, beam_idx.flip(0))))
    with pytest.raises(AssertionError):
        assert_cached_equals_uncached(model, ids, mask, num_beams=4)


@EVERY_VARIANT
def test_teacher_forced_logits_equal_step_by_step(model_type, fields):
    """Step by step through the cache (from the sources, then from the encoder's output with a prefix of several
    tokens first) gives the logits of one teacher-forced pass."""
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=DECODER_INPUT_IDS, use_cache=False).logits
        cache, steps = None, []
        for t in range(DECODER_INPUT_IDS.shape[1]):
            out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=DECODER_INPUT_IDS[:, t : t + 1],
                        cache=cache, use_cache=True)
            cache = output_cache(out)
            steps.append(out.logits)
    assert cache.get_seq_length() == DECODER_INPUT_IDS.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    with torch.no_grad():
        encoder_outputs = model.get_encoder()(input_ids=ids, attention_mask=mask)
        head = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=DECODER_INPUT_IDS[:, :4],
                     use_cache=True)
        tail = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=DECODER_INPUT_IDS[:, 4:],
                     cache=output_cache(head), use_cache=True)
    torch.testing.assert_close(torch.cat([head.logits, tail.logits], dim=1), full, atol=1e-5, rtol=0)


@EVERY_VARIANT
def test_generation_continued_from_a_returned_cache_equals_one_call(model_type, fields):
    """Two generate() calls, the second continuing from the cache the first returned, give the tokens, scores
    and final cache of one call; the Transformer's prompt is left-padded on some rows (the RNN reads its
    target from the left, so its prompts are whole)."""
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    prompt = torch.tensor([[5, 6, 7], [8, 9, 3], [4, 10, 6], [7, 7, 9]])  # not starting with START
    prompt_mask = torch.ones_like(prompt)
    if model_type == "transformer_seq2seq":
        prompt_mask[1, :1] = prompt_mask[2, :2] = 0
        prompt = prompt.masked_fill(prompt_mask == 0, PAD)
    one_call, first, second = generate_in_one_and_in_two_calls(model, ids, mask, prompt, prompt_mask)
    assert one_call.sequences.tolist() == second.sequences.tolist()
    torch.testing.assert_close(torch.stack(first.scores + second.scores), torch.stack(one_call.scores))
    expected, continued = output_cache(one_call), output_cache(second)
    assert continued.get_seq_length() == expected.get_seq_length() == one_call.sequences.shape[1] - 1
    for a, e in zip(cache_tensors(continued), cache_tensors(expected), strict=True):
        torch.testing.assert_close(a, e)  # transformers' tolerance for this test


def cross_attention_rows(out, row):
    """generate()'s cross-attention weights of one row, per layer: (heads x steps, S); [] when not returned (the
    Transformer under sdpa, the RNN without attention)."""
    if not out.cross_attentions or out.cross_attentions[0] is None or out.cross_attentions[0][0] is None:
        return []
    layers = len(out.cross_attentions[0])
    return [torch.cat([step[layer][row] for step in out.cross_attentions], dim=1).flatten(0, 1)
            for layer in range(layers)]


@EVERY_VARIANT
def test_padded_batch_equals_each_sentence_alone(model_type, fields):
    """Greedy and beam, with the attention mask and without it (generate() passes an encoder-decoder model no mask
    of its own: the model finds the padding from the pad id, in the encoder and in every decoding step). The rows
    of the batch generate what each sentence generates alone, with the same step scores, and the cross-attention
    weights (where the model returns them) are the sentence's alone, exactly zero on the padding."""
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    kwargs = dict(output_attentions=True, max_new_tokens=6, min_new_tokens=6)  # the same length for every row
    for mask_given in (True, False):
        for num_beams in (1, 3):
            batched = generate(model, ids, mask if mask_given else None, num_beams=num_beams, **kwargs)
            if num_beams == 1:  # the sentences' scores differ, so the equalities below compare something
                per_row = torch.stack(batched.scores, dim=1)  # (B, steps, V)
                assert not any(torch.allclose(per_row[i], per_row[0]) for i in range(1, len(SOURCES)))
            for i, source in enumerate(SOURCES):
                alone = generate(model, *batch(source), num_beams=num_beams, **kwargs)
                case = (mask_given, num_beams, i)
                assert alone.sequences[0].tolist() == batched.sequences[i].tolist(), case
                if num_beams > 1:
                    continue
                step_scores = torch.stack([s[i] for s in batched.scores])  # (steps, V)
                torch.testing.assert_close(step_scores, torch.cat(alone.scores), atol=1e-5, rtol=0, msg=str(case))
                for weights, alone_weights in zip(cross_attention_rows(batched, i), cross_attention_rows(alone, 0),
                                                  strict=True):  # (heads x steps, S_padded)
                    torch.testing.assert_close(weights[:, : len(source)], alone_weights, atol=1e-5, rtol=0)
                    assert (weights[:, len(source) :] == 0).all()  # exactly zero on padding
                    torch.testing.assert_close(weights.sum(-1), torch.ones(len(weights)), atol=1e-6, rtol=0)


@PRIMARY_VARIANT
def test_beam_search_returns_ranked_distinct_n_best_led_by_the_best(model_type, fields):
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    out = generate(model, ids, mask, num_beams=4, num_return_sequences=3, length_penalty=0.8)
    assert out.sequences.shape[0] == 3 * len(SOURCES)
    scores = out.sequences_scores.view(len(SOURCES), 3)  # (batch, n-best)
    assert (scores[:, :-1] >= scores[:, 1:]).all()
    best = generate(model, ids, mask, num_beams=4, length_penalty=0.8).sequences
    n_best = out.sequences.view(len(SOURCES), 3, -1)
    for row in range(len(SOURCES)):
        assert torch.equal(n_best[row, 0, : best.shape[1]], best[row])
        assert len({tuple(s.tolist()) for s in n_best[row]}) == 3  # distinct hypotheses


@PRIMARY_VARIANT
def test_sampling_is_seeded_and_no_repeat_ngram_holds(model_type, fields):
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    torch.manual_seed(3)
    first = generate(model, ids, mask, do_sample=True, top_k=5).sequences
    torch.manual_seed(3)
    assert torch.equal(generate(model, ids, mask, do_sample=True, top_k=5).sequences, first)
    for row in generate(model, ids, mask, num_beams=4, no_repeat_ngram_size=2, max_new_tokens=12).sequences.tolist():
        row = row[: row.index(EOS) + 1] if EOS in row else row  # up to the first </s> (beam search pads with it)
        bigrams = list(zip(row, row[1:], strict=False))
        assert len(bigrams) == len(set(bigrams)), row
    for row in generate(model, ids, mask, num_beams=2, no_repeat_ngram_size=1, max_new_tokens=8).sequences.tolist():
        tokens = row[1 : row.index(EOS) + 1] if EOS in row else row[1:]
        assert len(tokens) == len(set(tokens)), row


# ------------------------------------------------------------------------------------------ saving and loading


def logits_and_generation(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=DECODER_INPUT_IDS[:, :4])
    greedy = generate(model, ids, mask).sequences
    beam = generate(model, ids, mask, num_beams=3).sequences
    return out, greedy, beam


@pytest.mark.slow
@pytest.mark.parametrize(("model_type", "fields"), cases(SAVED))
def test_save_load_and_remote_code_in_fresh_process(model_type, fields, tmp_path):
    """A saved folder holds the family's code files and an auto_map naming its classes; it loads into the same
    classes with the same logits and generations, and in a fresh process without hf_s2s (trust_remote_code) into
    its own copies of the classes, again with the same logits and generations."""
    family = FAMILIES[model_type]
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    out, greedy, beam = logits_and_generation(model, ids, mask)
    assert_varied(greedy)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    assert {"model.safetensors", "generation_config.json", "config.json", *family.code_files} <= {
        p.name for p in folder.iterdir()}
    module = lambda cls: cls.__module__.rsplit(".", 1)[-1]  # noqa: E731  (the code file, without .py)
    assert json.loads((folder / "config.json").read_text())["auto_map"] == {
        "AutoConfig": f"{module(family.config_class)}.{family.config_class.__name__}",
        "AutoModel": f"{module(family.base_model_class)}.{family.base_model_class.__name__}",
        "AutoModelForSeq2SeqLM": f"{module(family.lm_class)}.{family.lm_class.__name__}",
    }
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (generation["pad_token_id"], generation["bos_token_id"], generation["eos_token_id"],
            generation["decoder_start_token_id"]) == (PAD, START, EOS, START)

    loaded = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    assert type(loaded) is family.lm_class
    if fields.get("tie_word_embeddings"):  # still tied: the output layer shares an embedding table's storage
        tables = {m.weight.data_ptr() for m in loaded.modules() if isinstance(m, torch.nn.Embedding)}
        assert loaded.get_output_embeddings().weight.data_ptr() in tables
    loaded_out, loaded_greedy, loaded_beam = logits_and_generation(loaded, ids, mask)
    # same weights; loaded tensors may sit at other memory alignments, so kernels may differ in the last ulp
    torch.testing.assert_close(loaded_out.logits, out.logits, atol=1e-6, rtol=0)
    assert torch.equal(loaded_greedy, greedy) and torch.equal(loaded_beam, beam)
    base = AutoModel.from_pretrained(folder).eval()
    assert type(base) is family.base_model_class
    with torch.no_grad():
        hidden = base(input_ids=ids, attention_mask=mask, decoder_input_ids=DECODER_INPUT_IDS[:, :4])
        expected = model.model(input_ids=ids, attention_mask=mask, decoder_input_ids=DECODER_INPUT_IDS[:, :4])
    torch.testing.assert_close(hidden.last_hidden_state, expected.last_hidden_state, atol=1e-6, rtol=0)

    fresh = run_without_hf_s2s(f"""
        import json, torch
        from transformers import AutoModel, AutoModelForSeq2SeqLM
        torch.set_num_threads(1)
        folder = {str(folder)!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        base = AutoModel.from_pretrained(folder, trust_remote_code=True)
        ids, mask = torch.tensor({ids.tolist()}), torch.tensor({mask.tolist()})
        kwargs = dict(input_ids=ids, attention_mask=mask, max_new_tokens=7)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask,
                           decoder_input_ids=torch.tensor({DECODER_INPUT_IDS[:, :4].tolist()})).logits
            greedy, beam = model.generate(**kwargs), model.generate(**kwargs, num_beams=3)
        print(json.dumps({{"logits": logits.tolist(), "greedy": greedy.tolist(), "beam": beam.tolist(),
                           "classes": [type(model).__name__, type(base).__name__],
                           "module": type(model).__module__}}))
        """, cwd=tmp_path)
    assert fresh["classes"] == [family.lm_class.__name__, family.base_model_class.__name__]
    assert not fresh["module"].startswith("hf_s2s")
    torch.testing.assert_close(torch.tensor(fresh["logits"]), out.logits, atol=1e-6, rtol=0)
    assert fresh["greedy"] == greedy.tolist() and fresh["beam"] == beam.tolist()


# ------------------------------------------------------------------------------------------------------ forward
# These run on the helpers' TINY sizes (one layer) with a vocabulary of 30 and no dropout (so training mode computes
# what eval mode computes).

VOCAB = 30
FAMILY = pytest.mark.parametrize("model_type", list(FAMILIES))


def tiny(model_type, **overrides):
    return random_tiny_model(model_type, VOCAB, dropout=0.0, **overrides)




def assert_same_tuple(actual, expected):
    assert isinstance(actual, tuple) and len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        if torch.is_tensor(e):
            torch.testing.assert_close(a, e, rtol=0, atol=0)


@FAMILY
def test_return_dict_false_gives_a_tuple_from_the_call_or_the_config(model_type):
    model = tiny(model_type)
    batch = labelled_batch()
    for module, inputs in ((model, {**batch, "use_cache": False}),
                           (model.model, {**decoder_inputs(model, batch), "use_cache": False})):
        expected = module(**inputs).to_tuple()
        assert_same_tuple(module(**inputs, return_dict=False), expected)
        module.config.return_dict = False
        try:
            assert_same_tuple(module(**inputs), expected)
            assert not isinstance(module(**inputs, return_dict=True), tuple)  # the call wins over the config
        finally:
            module.config.return_dict = True
    encoder_outputs = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                          return_dict=False)
    assert isinstance(encoder_outputs, tuple)


@FAMILY
def test_forward_accepts_unknown_keywords_as_transformers_models_do(model_type):
    """A keyword a newer transformers passes to forward (5.24 passes ``cache``; others may come) must not break
    decoding: like transformers' own models, both forwards accept and ignore keywords they do not use."""
    model = tiny(model_type)
    batch = labelled_batch()
    for module, inputs in ((model, batch), (model.model, decoder_inputs(model, batch))):
        plain = module(**inputs)[0]
        torch.testing.assert_close(module(**inputs, cache_position=None, position_ids=None, some_future_kwarg=1)[0], plain)
    with pytest.raises(TypeError, match="attention_masks"):  # the encoder is called by name: a typo stays an error
        model.get_encoder()(input_ids=batch["input_ids"], attention_masks=batch["attention_mask"])


@FAMILY
def test_the_cache_is_accepted_under_both_names_and_returned_under_the_installed_one(model_type):
    """transformers 5.24 renamed ``past_key_values`` to ``cache``: a forward takes either (older code and older
    transformers pass the old name), returns it under the name the installed transformers reads back, and refuses
    both at once as transformers does."""
    model = tiny(model_type)
    batch = labelled_batch()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    start = torch.full((3, 1), model.config.decoder_start_token_id)
    head = model(**inputs, decoder_input_ids=start, use_cache=True)
    assert CACHE_NAME in head.keys()
    step = batch["labels"][:, :1].clamp(min=0)
    logits = {}
    for name in CACHE_NAMES:
        first = model(**inputs, decoder_input_ids=start, use_cache=True)
        logits[name] = model(**inputs, decoder_input_ids=step, use_cache=True, **{name: output_cache(first)}).logits
    torch.testing.assert_close(logits["cache"], logits["past_key_values"], rtol=0, atol=0)
    uncached = model(**inputs, decoder_input_ids=torch.cat([start, step], dim=1)).logits[:, -1:]
    torch.testing.assert_close(logits["cache"], uncached, rtol=1e-5, atol=1e-5)
    cache = output_cache(model(**inputs, decoder_input_ids=start, use_cache=True))
    with pytest.raises(ValueError, match="both `cache` and `past_key_values`"):
        model(**inputs, decoder_input_ids=step, cache=cache, past_key_values=cache)


@FAMILY
def test_encoder_outputs_as_a_tuple_are_read_as_bart_reads_them_with_or_without_a_filled_cache(model_type):
    """transformers' clients pass ``encoder_outputs`` as a plain tuple (its first element the encoder's last
    hidden state) and keep passing it on every decoding step, the cache filled; BART wraps such a tuple into a
    BaseModelOutput whatever the cache holds. Both steps give the logits of the same call with the
    BaseModelOutput, and the output carries the same encoder state."""
    model = tiny(model_type)
    batch = labelled_batch()
    mask = batch["attention_mask"]
    start = torch.full((3, 1), model.config.decoder_start_token_id)
    step = batch["labels"][:, :1].clamp(min=0)
    with torch.no_grad():
        # per-layer states too: the Transformer's tuple then holds more than BART's three fields
        encoded = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=mask,
                                      output_hidden_states=True)
        results = {}
        for name, encoder_outputs in (("output", encoded), ("tuple", (encoded.last_hidden_state,)),
                                      ("long tuple", encoded.to_tuple())):
            first = model(attention_mask=mask, encoder_outputs=encoder_outputs, decoder_input_ids=start,
                          use_cache=True)
            second = model(attention_mask=mask, encoder_outputs=encoder_outputs, decoder_input_ids=step,
                           cache=output_cache(first), use_cache=True)
            results[name] = (first, second)
    for name in ("tuple", "long tuple"):
        for reference, result in zip(results["output"], results[name], strict=True):
            torch.testing.assert_close(result.logits, reference.logits, rtol=0, atol=0)
            torch.testing.assert_close(result.encoder_last_hidden_state, encoded.last_hidden_state,
                                       rtol=0, atol=0)


@FAMILY
def test_eval_logits_with_labels_are_the_ordinary_logits(model_type):
    """Logits do not depend on whether labels came along (they were zero after each row's last label)."""
    model = tiny(model_type)
    batch = labelled_batch()
    with torch.no_grad():
        with_labels = model(**batch).logits
        without = model(**decoder_inputs(model, batch)).logits
    torch.testing.assert_close(with_labels, without, rtol=0, atol=0)
    assert (with_labels[2, 2:] != 0).all()  # after the last label too
    model.train()
    assert model(**batch).logits is None  # training with labels: the loss only, from the label positions
    if model_type == "transformer_seq2seq":  # per-layer states asked by the config: the padded path, all returned
        model.config.output_hidden_states = True
        out = model(**batch)
        torch.testing.assert_close(out.logits, with_labels, rtol=1e-5, atol=1e-6)
        assert out.decoder_hidden_states[-1].shape[:2] == batch["labels"].shape


@pytest.mark.parametrize(("model_type", "fields"), per_family(SEPARATE_VOCABULARIES))
@pytest.mark.parametrize("argument", ["input_ids", "decoder_input_ids", "labels"])
def test_token_ids_outside_the_vocabulary_are_a_clear_error(model_type, fields, argument):
    """Each side is checked against its own vocabulary (source and target differ here), naming the argument, the
    id and the range; a negative label other than -100 is refused too."""
    model = make_model(model_type, fields)
    source, target = fields["vocab_size"], fields["decoder_vocab_size"]
    ids, mask = batch(*SOURCES)
    valid_decoder_input_ids = torch.tensor([[START, 3, 4]] * len(SOURCES))  # in every target vocabulary here
    inputs = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": valid_decoder_input_ids}
    if argument == "input_ids":
        inputs["input_ids"] = ids.masked_fill(ids == 12, source)
        message = rf"`input_ids` holds token id {source}, outside the model's vocabulary \[0, {source}\)"
    elif argument == "decoder_input_ids":
        inputs["decoder_input_ids"] = torch.tensor([[START, target + 2]] * len(SOURCES))
        message = rf"`decoder_input_ids` holds token id {target + 2}, outside .* \[0, {target}\)"
    else:  # with decoder inputs of their own, the labels' check speaks; labels alone are shifted into decoder inputs
        for labels, message in ((torch.tensor([[5, target, -100]] * len(SOURCES)),
                                 rf"`labels` holds token id {target}, outside .* \[0, {target}\)"),
                                (torch.tensor([[START, -5, 2]] * len(SOURCES)), r"`labels` holds token id -5")):
            with pytest.raises(ValueError, match=message):
                model(**inputs, labels=labels)
        del inputs["decoder_input_ids"]
        inputs["labels"] = torch.tensor([[5, target, 2]] * len(SOURCES))
        message = rf"`(labels|decoder_input_ids)` holds token id {target}, outside .* \[0, {target}\)"
    with pytest.raises(ValueError, match=message):
        model(**inputs)


# ----------------------------------------------------------------------------------------------------- training


@PRIMARY_VARIANT
def test_loss_is_the_token_mean_and_halves_of_an_accumulated_batch_add_up(model_type, fields):
    """The loss is the mean cross-entropy over label tokens; with ``num_items_in_batch`` (all label tokens), two
    uneven accumulation steps add up to the full batch's loss and gradient (a per-step mean would weight the short
    step's tokens more). Labels alone give the decoder inputs: the start token, then the labels shifted right with
    -100 as padding."""
    model = make_model(model_type, fields)
    ids, mask = batch(*SOURCES)
    labels = torch.tensor([[5, 6, 7, 2], [8, 2, -100, -100], [9, 10, 3, 2], [4, 2, -100, -100]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    expected = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    shifted = model.prepare_decoder_input_ids_from_labels(labels)
    assert shifted[:, 0].eq(START).all()
    assert torch.equal(shifted[:, 1:], labels[:, :-1].masked_fill(labels[:, :-1] == -100, PAD))
    explicit = model(input_ids=ids, attention_mask=mask, labels=labels, decoder_input_ids=shifted)
    torch.testing.assert_close(explicit.loss, out.loss)

    total = (labels != -100).sum()
    torch.testing.assert_close(model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=total).loss,
                               expected)
    model.zero_grad()
    out.loss.backward()
    full_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    summed = 0.0
    for rows in (slice(0, 1), slice(1, 4)):
        part_labels = labels[rows]
        width = int((part_labels != -100).sum(1).max())
        step = model(input_ids=ids[rows], attention_mask=mask[rows], labels=part_labels[:, :width],
                     num_items_in_batch=total)
        step.loss.backward()
        summed = summed + step.loss.detach()
    torch.testing.assert_close(summed, out.loss.detach())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, full_grads[name], atol=1e-6, rtol=1e-4, msg=name)


@FAMILY
@pytest.mark.parametrize("with_num_items", [False, True])
def test_label_smoothing_in_the_model_equals_trainers_label_smoother(model_type, with_num_items):
    """Eval (full logits) and training (padding-free) losses both equal transformers' LabelSmoother on the logits."""
    model = tiny(model_type, label_smoothing=0.1)
    batch = labelled_batch()
    num_items = {"num_items_in_batch": torch.tensor(11)} if with_num_items else {}
    with torch.no_grad():
        out = model(**batch, **num_items)
        expected = LabelSmoother(epsilon=0.1)({"logits": out.logits}, batch["labels"], **num_items)
        torch.testing.assert_close(out.loss, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(model.train()(**batch, **num_items).loss, expected, rtol=0, atol=1e-6)


@FAMILY
def test_padding_free_training_gives_the_gradients_of_the_padded_computation(model_type):
    """The packed path (labels in training mode) against the full logits of the same batch, smoothed by
    LabelSmoother: the same gradient for every parameter."""
    batch = labelled_batch()
    num_items = torch.tensor(11)
    packed = tiny(model_type, label_smoothing=0.1).train()
    packed(**batch, num_items_in_batch=num_items).loss.backward()
    padded = tiny(model_type).train()
    outputs = padded(**decoder_inputs(padded, batch))
    LabelSmoother(epsilon=0.1)(outputs, batch["labels"], num_items_in_batch=num_items).backward()
    for (name, a), (_, b) in zip(packed.named_parameters(), padded.named_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6, msg=name)


# R-Drop (config.rdrop_alpha > 0): a training forward with labels runs its batch twice, as one batch of 2B rows.
# Label layouts: with padding (the padding-free path packs each row up to its last label) and without (nothing to
# skip: the output layer runs on the ordinary (2B, T, V) layout).
RDROP_LABELS = {
    "padding-free": labelled_batch()["labels"],
    "padded-layout": torch.tensor([[12, 13, 14, 2], [15, 9, 8, 2], [16, 3, 4, 2]]),
}


@contextmanager
def output_layer_records(model):
    """The output layer's outputs of each forward inside the block, in order: the logits the loss is computed from."""
    records = []
    hook = model.get_output_embeddings().register_forward_hook(lambda module, args, output: records.append(output))
    try:
        yield records
    finally:
        hook.remove()


def labels_of(logits, labels):
    """The labels (flat, -100 kept) of the output layer's rows: every position of (B, T, V) logits; of (N, V) logits
    (the padding-free path), each row's positions up to its last label, row after row."""
    if logits.dim() == 3:
        return labels.reshape(-1)
    positions = torch.arange(labels.shape[1])
    last = torch.where(labels != -100, positions, -1).amax(dim=1)  # (B,)
    return labels[positions[None, :] <= last[:, None]]


def rdrop_reference(logits, labels, num_items, eps, alpha):
    """R-Drop's loss written out from the paper (Liang et al. 2021, its L_NLL + alpha L_KL), in float64: per token
    L = CE(P1) + CE(P2) + alpha / 2 (KL(P1 || P2) + KL(P2 || P1)), halved (the mean of the two passes'
    cross-entropies), summed over the label tokens and divided by ``num_items`` (one copy's count, as Trainer gives
    it); CE label-smoothed as transformers' LabelSmoother: (1 - eps) (-log p_y) + eps mean_v(-log p_v).
    logits: the output layer's rows, first pass then second; labels: theirs. Returns (loss, summed KL term)."""
    log_p1, log_p2 = logits.reshape(-1, logits.shape[-1]).double().log_softmax(-1).chunk(2)
    first_labels = labels.chunk(2)[0]
    real = first_labels != -100
    target = first_labels.clamp(min=0)[:, None]

    def cross_entropy(log_p):
        nll = -log_p.gather(-1, target).squeeze(-1)
        return ((1 - eps) * nll + eps * -log_p.mean(-1))[real].sum()

    def kl(log_p, log_q):  # KL(P || Q) = sum_v p_v (log p_v - log q_v)
        return (log_p.exp() * (log_p - log_q)).sum(-1)[real].sum()

    kl_term = (kl(log_p1, log_p2) + kl(log_p2, log_p1)) / 2
    return (cross_entropy(log_p1) + cross_entropy(log_p2) + alpha * kl_term) / 2 / num_items, kl_term


@FAMILY
@pytest.mark.parametrize("layout", list(RDROP_LABELS))
@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["no-dropout", "dropout"])
def test_rdrop_loss_is_the_papers_formula_on_the_two_passes_logits(model_type, layout, dropout):
    """The model's R-Drop loss equals the paper's formula computed here on the output layer's logits of the two
    passes, label-smoothed and normalised by ``num_items_in_batch``, on the padding-free path and the padded layout.
    With dropout the passes differ (each copy drew its own masks) and the KL term is positive; without, the passes
    are the same, the KL term is 0 and the loss is the one-pass loss."""
    batch = {**labelled_batch(), "labels": RDROP_LABELS[layout]}
    model = random_tiny_model(model_type, VOCAB, dropout=dropout, label_smoothing=0.1, rdrop_alpha=5.0).train()
    num_items = torch.tensor(20)  # Trainer's count over an accumulated batch: more than this piece's label tokens
    with output_layer_records(model) as records:
        loss = model(**batch, num_items_in_batch=num_items).loss
    (logits,) = records
    assert logits.dim() == (2 if layout == "padding-free" else 3)
    expected, kl_term = rdrop_reference(logits, labels_of(logits, torch.cat([batch["labels"]] * 2)), num_items,
                                        eps=0.1, alpha=5.0)
    torch.testing.assert_close(loss.double(), expected, rtol=1e-6, atol=0)
    first, second = logits.chunk(2)
    if dropout:
        assert kl_term > 0 and not torch.equal(first, second)
    else:
        assert kl_term == 0 and torch.equal(first, second)
        model.config.rdrop_alpha = 0.0
        torch.testing.assert_close(loss, model(**batch, num_items_in_batch=num_items).loss, rtol=1e-6, atol=0)


@FAMILY
def test_rdrop_alpha_0_runs_one_pass_with_the_loss_and_gradients_of_before(model_type):
    """``rdrop_alpha`` = 0 (the default) leaves training as it was: one pass over the batch, and the loss and every
    gradient bit for bit those of ``seq2seq_loss`` on that pass's logits (with dropout and label smoothing on)."""
    batch = labelled_batch()
    model = random_tiny_model(model_type, VOCAB, dropout=0.3, label_smoothing=0.1).train()
    assert model.config.rdrop_alpha == 0.0
    num_items = torch.tensor(11)
    with output_layer_records(model) as records:
        loss = model(**batch, num_items_in_batch=num_items).loss
    (logits,) = records
    labels = labels_of(logits, batch["labels"])
    assert logits.shape[0] == labels.shape[0]  # the rows of one copy of the batch
    reference = seq2seq_loss(logits, labels, num_items, label_smoothing=0.1)
    assert torch.equal(loss, reference)
    parameters = [p for p in model.parameters() if p.requires_grad]
    gradients = torch.autograd.grad(loss, parameters, retain_graph=True)
    for got, expected in zip(gradients, torch.autograd.grad(reference, parameters), strict=True):
        assert torch.equal(got, expected)


@FAMILY
def test_rdrop_refuses_encoder_outputs_it_would_not_run_twice(model_type):
    batch = labelled_batch()
    model = random_tiny_model(model_type, VOCAB, dropout=0.3, rdrop_alpha=1.0).train()
    encoder_outputs = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    with pytest.raises(ValueError, match=r"R-Drop \(config.rdrop_alpha > 0\) runs a training forward with labels "
                                         r"twice, encoder included, but it was given encoder_outputs"):
        model(encoder_outputs=encoder_outputs, attention_mask=batch["attention_mask"], labels=batch["labels"])
    assert model.eval()(encoder_outputs=encoder_outputs, attention_mask=batch["attention_mask"],
                        labels=batch["labels"]).loss is not None  # evaluation runs no R-Drop


@pytest.mark.slow
@pytest.mark.parametrize(("model_type", "case"), cases(REVERSAL))
def test_learns_reversal_with_seq2seq_trainer(model_type, case, tmp_path):
    fields, recipe, exact_match = case
    torch.manual_seed(0)
    model = FAMILIES[model_type].lm_class(FAMILIES[model_type].config_class(**fields))
    assert train_reversal(model, tmp_path, num_symbols=8, max_len=6, **recipe) >= exact_match
