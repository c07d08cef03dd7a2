"""What modeling_common.py adds beyond the contract every family meets (test_family_contract.py): the config's
output flags, attentions asked under sdpa, the training job moving label smoothing and R-Drop into the model, R-Drop's
loss normalisation, and the alignment / plotting helpers leaving the caller's state alone."""

import logging
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments

from hf_s2s.data.tokenization import train_tokenizer_from_texts
from hf_s2s.inference.translate import alignment
from hf_s2s.models.modeling_common import rdrop_loss, seq2seq_loss
from hf_s2s.training.arguments import TrainingArguments
from hf_s2s.training.run import move_loss_into_model
from tests.helpers import TINY, decoder_inputs, labelled_batch, random_tiny_model

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

VOCAB = 30


def make_model(model_type, attn_implementation=None):
    """A tiny random model without dropout (so training mode computes what eval mode computes), in eval mode."""
    return random_tiny_model(model_type, VOCAB, attn_implementation=attn_implementation, dropout=0.0)




# ------------------------------------------------------------------------------------------- outputs and flags


def test_config_output_flags_are_honoured_when_the_call_does_not_pass_them():
    model = make_model("transformer_seq2seq", attn_implementation="eager")
    inputs = decoder_inputs(model, labelled_batch())
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
    weights = rnn(**decoder_inputs(rnn, labelled_batch())).cross_attentions[0]  # (B, 1, T, S)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_attentions_asked_under_sdpa_warn_and_return_none_as_transformers_does(caplog):
    model = make_model("transformer_seq2seq", attn_implementation="sdpa")
    inputs = decoder_inputs(model, labelled_batch())
    logging.Logger.warning_once.cache_clear()  # transformers warns once per message and process
    with caplog.at_level(logging.WARNING):
        out = model(**inputs, output_attentions=True)
    assert "`sdpa` attention does not support `output_attentions=True`" in caplog.text
    assert all(weights is None for weights in out.cross_attentions)
    torch.testing.assert_close(out.logits, model(**inputs).logits, rtol=0, atol=0)


# --------------------------------------------------------------------------------------------- loss and logits


def test_training_job_moves_label_smoothing_into_the_model_so_labels_reach_it(tmp_path):
    model = make_model("transformer_seq2seq").train()
    batch = labelled_batch()
    batch["decoder_input_ids"] = model.prepare_decoder_input_ids_from_labels(batch["labels"])  # as the collator
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.1, use_cpu=True,
                                    report_to="none")
    num_items = torch.tensor(11)
    reference = Seq2SeqTrainer(model=model, args=args).compute_loss(model, dict(batch), num_items_in_batch=num_items)
    trainer = Seq2SeqTrainer(model=model, args=args)
    move_loss_into_model(trainer)
    loss, outputs = trainer.compute_loss(model, dict(batch), return_outputs=True, num_items_in_batch=num_items)
    torch.testing.assert_close(loss, reference, rtol=0, atol=1e-6)
    assert outputs.logits is None  # the model had the labels: its padding-free loss path ran
    assert model.config.label_smoothing == 0.1 and trainer.args.label_smoothing_factor == 0.1


@pytest.mark.parametrize("layout", ["padding-free", "padded"])
def test_rdrop_losses_of_the_pieces_of_a_batch_add_up_to_the_whole_batchs(layout):
    """Gradient accumulation and several processes (Trainer scales each process's loss by the world size, DDP
    averages) give one big batch's loss only if every term is a token sum over ``num_items_in_batch`` (one copy's
    label tokens in the whole step). Two passes that differ, as dropout makes them, so the KL term counts: pieces of
    uneven sizes add up to the whole, which without ``num_items_in_batch`` is the same per-token mean."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(3, 11, (4, 5), generator=generator)  # (B, T)
    labels[1, 3:], labels[2, 1], labels[3, 2:] = -100, -100, -100
    first, second = torch.randn(2, 4, 5, 11, generator=generator)  # two passes' logits, (B, T, V) each

    def loss(rows: slice, num_items):
        logits, repeated = torch.cat([first[rows], second[rows]]), torch.cat([labels[rows], labels[rows]])
        if layout == "padding-free":  # the label positions only, packed: (N, V), as the output layer gets them
            logits, repeated = logits[repeated != -100], repeated[repeated != -100]
        return rdrop_loss(logits, repeated, num_items, label_smoothing=0.1, rdrop_alpha=5.0)

    total = (labels != -100).sum()
    whole = loss(slice(0, 4), total)
    torch.testing.assert_close(loss(slice(0, 1), total) + loss(slice(1, 4), total), whole)
    torch.testing.assert_close(loss(slice(0, 4), None), whole)
    plain = seq2seq_loss(torch.cat([first, second]), torch.cat([labels, labels]), 2 * total, label_smoothing=0.1)
    assert whole > plain  # the KL term is there: two different passes


def test_training_job_moves_rdrop_alpha_into_the_model_and_warns_when_it_cannot_act(tmp_path, caplog):
    """``--rdrop_alpha`` reaches the model's config (transformers' own arguments leave it 0); with no dropout in
    the model both passes are the same, and the run is told so."""
    for dropout, warned in ((0.3, False), (0.0, True)):
        model = random_tiny_model("transformer_seq2seq", VOCAB, dropout=dropout)
        args = TrainingArguments(output_dir=str(tmp_path), rdrop_alpha=5.0, use_cpu=True, report_to="none")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hf_s2s.training.trainer"):
            move_loss_into_model(Seq2SeqTrainer(model=model, args=args))
        assert model.config.rdrop_alpha == 5.0
        assert ("with no dropout in the model: both passes of each batch are the same" in caplog.text) is warned
    plain = Seq2SeqTrainer(model=model, args=Seq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True,
                                                                      report_to="none"))
    move_loss_into_model(plain)
    assert model.config.rdrop_alpha == 0.0


# ---------------------------------------------------------------------------------------- alignment and plots


def test_alignment_leaves_the_models_attention_implementation_as_it_was():
    tokenizer = train_tokenizer_from_texts(["a b c d e f g", "b c d a", "g f e d c b a"] * 20, vocab_size=40, byte_fallback=False)
    config = AutoConfig.for_model("transformer_seq2seq", **TINY["transformer_seq2seq"], vocab_size=len(tokenizer))
    model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="sdpa")
    weights, source_tokens, target_tokens = alignment(model, tokenizer, "a b c", max_new_tokens=4)
    assert model.config._attn_implementation == "sdpa"
    assert weights.shape == (len(target_tokens), len(source_tokens))
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(target_tokens)))


@pytest.mark.slow
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
