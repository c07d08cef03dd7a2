"""What both families share (modeling_common.py): outputs and flags as transformers' own models give them
(``return_dict=False`` tuples, the config's output flags, attentions asked under sdpa, misspelled keywords), the
label-smoothed loss against Trainer's ``LabelSmoother`` and the training job moving it into the model, ordinary
logits, and the alignment / plotting helpers leaving the caller's state alone."""

import logging
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments
from transformers.trainer_pt_utils import LabelSmoother

from hf_s2s.data.tokenization import train_tokenizer_from_texts
from hf_s2s.inference.translate import alignment
from hf_s2s.models.transformers_compat import CACHE_NAME, CACHE_NAMES, output_cache
from hf_s2s.training.run import smooth_labels_in_model
from tests.helpers import TINY

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

FAMILIES = ["transformer_seq2seq", "rnn_seq2seq"]
VOCAB = 30


def make_model(model_type, attn_implementation=None, seed=0, **overrides):
    """A tiny random model without dropout (so training mode computes what eval mode computes), in eval mode."""
    config = AutoConfig.for_model(model_type, **TINY[model_type], vocab_size=VOCAB, dropout=0.0, **overrides)
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation=attn_implementation)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                torch.nn.init.normal_(parameter, std=0.3)
    return model.eval()


def padded_batch():
    """Right-padded sources and labels with -100 after each row's end (and one -100 inside a row)."""
    input_ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [11, 2, 0, 0, 0]])
    labels = torch.tensor([[12, 13, 14, 2], [15, -100, 2, -100], [16, 2, -100, -100]])
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long(), "labels": labels}


def decoder_inputs(model, batch):
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
            "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(batch["labels"])}


def assert_same_tuple(actual, expected):
    assert isinstance(actual, tuple) and len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        if torch.is_tensor(e):
            torch.testing.assert_close(a, e, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------- outputs and flags


@pytest.mark.parametrize("model_type", FAMILIES)
def test_return_dict_false_gives_a_tuple_from_the_call_or_the_config(model_type):
    model = make_model(model_type)
    batch = padded_batch()
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


def test_config_output_flags_are_honoured_when_the_call_does_not_pass_them():
    model = make_model("transformer_seq2seq", attn_implementation="eager")
    inputs = decoder_inputs(model, padded_batch())
    asked = model(**inputs, output_attentions=True, output_hidden_states=True)
    model.config.output_attentions = True
    model.config.output_hidden_states = True
    from_config = model(**inputs)
    layers = model.config.decoder_layers
    assert len(from_config.cross_attentions) == layers and len(from_config.decoder_hidden_states) == layers + 1
    assert len(from_config.encoder_attentions) == model.config.encoder_layers
    for name in ("cross_attentions", "decoder_attentions", "encoder_attentions", "decoder_hidden_states",
                 "encoder_hidden_states"):
        for a, e in zip(from_config[name], asked[name], strict=True):
            torch.testing.assert_close(a, e, rtol=0, atol=0)
    assert model(**inputs, output_attentions=False).cross_attentions is None  # the call wins over the config

    rnn = make_model("rnn_seq2seq")
    rnn.config.output_attentions = True
    weights = rnn(**decoder_inputs(rnn, padded_batch())).cross_attentions[0]  # (B, 1, T, S)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_attentions_asked_under_sdpa_warn_and_return_none_as_transformers_does(caplog):
    model = make_model("transformer_seq2seq", attn_implementation="sdpa")
    inputs = decoder_inputs(model, padded_batch())
    logging.Logger.warning_once.cache_clear()  # transformers warns once per message and process
    with caplog.at_level(logging.WARNING):
        out = model(**inputs, output_attentions=True)
    assert "`sdpa` attention does not support `output_attentions=True`" in caplog.text
    assert all(weights is None for weights in out.cross_attentions)
    torch.testing.assert_close(out.logits, model(**inputs).logits, rtol=0, atol=0)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_forward_accepts_unknown_keywords_as_transformers_models_do(model_type):
    """A keyword a newer transformers passes to forward (5.24 passes ``cache``; others may come) must not break
    decoding: like transformers' own models, both forwards accept and ignore keywords they do not use."""
    model = make_model(model_type)
    batch = padded_batch()
    for module, inputs in ((model, batch), (model.model, decoder_inputs(model, batch))):
        plain = module(**inputs)[0]
        torch.testing.assert_close(module(**inputs, cache_position=None, position_ids=None, some_future_kwarg=1)[0], plain)
    with pytest.raises(TypeError, match="attention_masks"):  # the encoder is called by name: a typo stays an error
        model.get_encoder()(input_ids=batch["input_ids"], attention_masks=batch["attention_mask"])


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_cache_is_accepted_under_both_names_and_returned_under_the_installed_one(model_type):
    """transformers 5.24 renamed ``past_key_values`` to ``cache``: a forward takes either (older code and older
    transformers pass the old name), returns it under the name the installed transformers reads back, and refuses
    both at once as transformers does."""
    model = make_model(model_type)
    batch = padded_batch()
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


# --------------------------------------------------------------------------------------------- loss and logits


@pytest.mark.parametrize("model_type", FAMILIES)
def test_eval_logits_with_labels_are_the_ordinary_logits(model_type):
    """Logits do not depend on whether labels came along (they were zero after each row's last label)."""
    model = make_model(model_type)
    batch = padded_batch()
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


@pytest.mark.parametrize("model_type", FAMILIES)
@pytest.mark.parametrize("with_num_items", [False, True])
def test_label_smoothing_in_the_model_equals_trainers_label_smoother(model_type, with_num_items):
    """Eval (full logits) and training (padding-free) losses both equal transformers' LabelSmoother on the logits."""
    model = make_model(model_type, label_smoothing=0.1)
    batch = padded_batch()
    num_items = {"num_items_in_batch": torch.tensor(11)} if with_num_items else {}
    with torch.no_grad():
        out = model(**batch, **num_items)
        expected = LabelSmoother(epsilon=0.1)({"logits": out.logits}, batch["labels"], **num_items)
        torch.testing.assert_close(out.loss, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(model.train()(**batch, **num_items).loss, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_padding_free_training_gives_the_gradients_of_the_padded_computation(model_type):
    """The packed path (labels in training mode) against the full logits of the same batch, smoothed by
    LabelSmoother: the same gradient for every parameter."""
    batch = padded_batch()
    num_items = torch.tensor(11)
    packed = make_model(model_type, label_smoothing=0.1).train()
    packed(**batch, num_items_in_batch=num_items).loss.backward()
    padded = make_model(model_type).train()
    outputs = padded(**decoder_inputs(padded, batch))
    LabelSmoother(epsilon=0.1)(outputs, batch["labels"], num_items_in_batch=num_items).backward()
    for (name, a), (_, b) in zip(packed.named_parameters(), padded.named_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_training_job_moves_label_smoothing_into_the_model_so_labels_reach_it(tmp_path):
    model = make_model("transformer_seq2seq").train()
    batch = padded_batch()
    batch["decoder_input_ids"] = model.prepare_decoder_input_ids_from_labels(batch["labels"])  # as the collator
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.1, use_cpu=True,
                                    report_to="none")
    num_items = torch.tensor(11)
    reference = Seq2SeqTrainer(model=model, args=args).compute_loss(model, dict(batch), num_items_in_batch=num_items)
    trainer = Seq2SeqTrainer(model=model, args=args)
    smooth_labels_in_model(trainer)
    loss, outputs = trainer.compute_loss(model, dict(batch), return_outputs=True, num_items_in_batch=num_items)
    torch.testing.assert_close(loss, reference, rtol=0, atol=1e-6)
    assert outputs.logits is None  # the model had the labels: its padding-free loss path ran
    assert model.config.label_smoothing == 0.1 and trainer.args.label_smoothing_factor == 0.1


# ---------------------------------------------------------------------------------------- alignment and plots


def test_alignment_leaves_the_models_attention_implementation_as_it_was():
    tokenizer = train_tokenizer_from_texts(["a b c d e f g", "b c d a", "g f e d c b a"] * 20, vocab_size=40, byte_fallback=False)
    config = AutoConfig.for_model("transformer_seq2seq", **TINY["transformer_seq2seq"], vocab_size=len(tokenizer))
    model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="sdpa")
    weights, source_tokens, target_tokens = alignment(model, tokenizer, "a b c", max_new_tokens=4)
    assert model.config._attn_implementation == "sdpa"
    assert weights.shape == (len(target_tokens), len(source_tokens))
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(target_tokens)))


def test_training_module_and_plots_leave_the_matplotlib_backend_alone(tmp_path):
    script = f"""
        import matplotlib
        matplotlib.use("svg")
        import matplotlib.image
        import torch
        import hf_s2s.training.run
        from hf_s2s.inference.plots import plot_alignment
        plot_alignment(torch.eye(2), ["a", "b"], ["x", "y"], {str(tmp_path / "plot.png")!r})
        print(matplotlib.get_backend(), matplotlib.image.imread({str(tmp_path / "plot.png")!r}).ndim)
    """
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.split() == ["svg", "3"]
