"""Each fast path of the modeling files equals the plain path beside it: the Transformer's padding-free execution
(outputs, loss, gradients, generate() tokens), the RNN decoding step through the fused cell kernels, and the shared
vocabulary's one token table (tied through transformers' ``_tied_weights_keys``: saved once, loaded into both)."""

import logging

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from hf_s2s import TransformerSeq2SeqConfig, TransformerSeq2SeqForConditionalGeneration
from hf_s2s.models.cache_rnn_seq2seq import RNNSeq2SeqCache, run_rnn, step_cells
from hf_s2s.models.modeling_common import TokenPacking

VOCAB, PAD, START, EOS = 31, 0, 1, 2

# Right-padded sources and labels of different lengths (-100 after each row's last label), as the collator gives them.
SOURCES = torch.tensor([[5, 9, 4, 7, 11, 2], [8, 3, 6, 2, PAD, PAD], [12, 13, 2, PAD, PAD, PAD], [7, 2, PAD, PAD, PAD, PAD]])
LABELS = torch.tensor([[4, 5, 6, 2, -100], [7, 9, 10, 11, 2], [3, 2, -100, -100, -100], [6, 2, -100, -100, -100]])


def transformer(seed: int = 0, **overrides) -> TransformerSeq2SeqForConditionalGeneration:
    """A tiny Transformer without dropout (the two paths draw different dropout masks), its weights spread so that
    outputs differ between inputs."""
    config = TransformerSeq2SeqConfig(
        vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD, bos_token_id=START, eos_token_id=EOS,
        decoder_start_token_id=START, **overrides,
    )
    torch.manual_seed(seed)
    model = TransformerSeq2SeqForConditionalGeneration(config)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                torch.nn.init.normal_(parameter, std=0.3)
    return model


def set_padding_free(model, enabled: bool) -> None:
    model.model.encoder.padding_free = model.model.decoder.padding_free = enabled


def loss_and_gradients(model, packed: bool) -> tuple[torch.Tensor, dict]:
    """The training loss and its gradients: through the padding-free path (labels in training: packed stacks, output
    layer on the needed positions), or the plain one (every position, the loss over full logits)."""
    model.train().zero_grad()
    set_padding_free(model, packed)
    mask = SOURCES.ne(PAD).long()
    if packed:
        loss = model(input_ids=SOURCES, attention_mask=mask, labels=LABELS).loss
    else:
        decoder_input_ids = model.prepare_decoder_input_ids_from_labels(LABELS)
        logits = model(input_ids=SOURCES, attention_mask=mask, decoder_input_ids=decoder_input_ids).logits
        loss = F.cross_entropy(logits.flatten(0, 1), LABELS.flatten(), ignore_index=-100)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("norm_position", "attn_implementation"), [("pre", "sdpa"), ("post", "eager")])
def test_transformer_padding_free_path_gives_the_plain_paths_loss_and_gradients(norm_position, attn_implementation):
    model = transformer(norm_position=norm_position)
    model.set_attn_implementation(attn_implementation)
    packed_loss, packed_grads = loss_and_gradients(model, packed=True)
    plain_loss, plain_grads = loss_and_gradients(model, packed=False)
    torch.testing.assert_close(packed_loss, plain_loss, rtol=1e-5, atol=1e-6)
    assert packed_grads.keys() == plain_grads.keys() and len(packed_grads) == len(list(model.parameters()))
    for name in plain_grads:
        torch.testing.assert_close(packed_grads[name], plain_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def test_transformer_padding_free_path_gives_the_plain_paths_outputs():
    """The encoder (source packing) and the decoder without a cache (the positions up to each row's last label):
    equal outputs on the real and needed positions, zeros elsewhere on the padding-free path."""
    model = transformer(seed=1).eval()
    mask = SOURCES.ne(PAD)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(LABELS)
    needed = TokenPacking.through_last_label(LABELS)
    outputs = {}
    with torch.no_grad():
        for packed in (True, False):
            set_padding_free(model, packed)
            outputs[packed] = model.model(input_ids=SOURCES, attention_mask=mask.long(),
                                          decoder_input_ids=decoder_input_ids, decoder_packing=needed, use_cache=False)
    encoded, plain_encoded = outputs[True].encoder_last_hidden_state, outputs[False].encoder_last_hidden_state
    torch.testing.assert_close(encoded[mask], plain_encoded[mask], rtol=1e-5, atol=1e-6)
    assert not encoded[~mask].any()
    kept = LABELS.ne(-100)  # a prefix of each row, through its last label
    decoded, plain_decoded = outputs[True].last_hidden_state, outputs[False].last_hidden_state
    torch.testing.assert_close(decoded[kept], plain_decoded[kept], rtol=1e-5, atol=1e-6)
    assert not decoded[~kept].any()


@pytest.mark.parametrize("num_beams", [1, 3])
def test_transformer_padding_free_encoder_generates_the_plain_paths_tokens(num_beams):
    model = transformer(seed=2).eval()
    tokens = {}
    for packed in (True, False):
        set_padding_free(model, packed)
        with torch.no_grad():
            tokens[packed] = model.generate(input_ids=SOURCES, attention_mask=SOURCES.ne(PAD).long(),
                                            max_new_tokens=8, num_beams=num_beams, do_sample=False)
    assert len({tuple(row) for row in tokens[False].tolist()}) > 1  # the equality has teeth
    assert torch.equal(tokens[True], tokens[False])


@pytest.mark.parametrize("cell_type", ["gru", "lstm"])
def test_rnn_decoding_step_through_the_cell_kernels_equals_the_module_call(cell_type):
    """``step_cells`` (one token, the fused cell kernels layer by layer: what decoding and torch.compile run) gives
    the outputs and states of calling nn.GRU / nn.LSTM on a length-1 sequence."""
    torch.manual_seed(0)
    rnn = getattr(torch.nn, cell_type.upper())(6, 5, num_layers=2, batch_first=True).eval()
    inputs = torch.randn(3, 1, 6)  # (B, 1, D_in)
    hidden = torch.randn(3, 2, 5)  # (B, L, H)
    cell = torch.randn(3, 2, 5) if cell_type == "lstm" else None
    fused, plain, again = (RNNSeq2SeqCache.from_tensors(hidden, cell, *[None] * 5) for _ in range(3))
    with torch.no_grad():
        fused_outputs = run_rnn(rnn, inputs, fused)  # T = 1 in eval: the fast path
        rnn.train()  # the module call, as in training (no dropout between these layers)
        plain_outputs = run_rnn(rnn, inputs, plain)
    torch.testing.assert_close(fused_outputs, plain_outputs, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fused.hidden, plain.hidden, rtol=1e-6, atol=1e-6)
    if cell is not None:
        torch.testing.assert_close(fused.cell, plain.cell, rtol=1e-6, atol=1e-6)
    with torch.no_grad():  # and step_cells alone, as the fast path calls it
        torch.testing.assert_close(step_cells(rnn.eval(), inputs[:, 0], again), fused_outputs[:, 0])


@pytest.mark.parametrize("tie_word_embeddings", [True, False])
def test_a_shared_vocabulary_is_one_table_saved_once_and_loaded_into_both(tie_word_embeddings, tmp_path, caplog):
    model = transformer(seed=3, tie_word_embeddings=tie_word_embeddings).eval()
    encoder_table = model.model.encoder.embed_tokens
    assert model.model.decoder.embed_tokens.weight is encoder_table.weight
    assert (model.lm_head.weight is encoder_table.weight) == tie_word_embeddings
    assert "model.decoder.embed_tokens.weight" in model.all_tied_weights_keys  # whatever tie_word_embeddings says
    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert "model.encoder.embed_tokens.weight" in saved and "model.decoder.embed_tokens.weight" not in saved
    assert ("lm_head.weight" in saved) != tie_word_embeddings

    with caplog.at_level(logging.WARNING, logger="transformers"):
        loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert not [r for r in caplog.records if "newly initialized" in r.getMessage() or "MISSING" in r.getMessage()]
    assert loaded.model.decoder.embed_tokens.weight is loaded.model.encoder.embed_tokens.weight
    assert (loaded.lm_head.weight is loaded.model.encoder.embed_tokens.weight) == tie_word_embeddings
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(LABELS)
    with torch.no_grad():
        expected = model(input_ids=SOURCES, decoder_input_ids=decoder_input_ids).logits
        got = loaded(input_ids=SOURCES, decoder_input_ids=decoder_input_ids).logits
    assert torch.equal(got, expected)


def test_separate_vocabularies_keep_their_own_tables(tmp_path):
    model = transformer(seed=4, share_encoder_decoder_embeddings=False, decoder_vocab_size=VOCAB + 6).eval()
    assert model.model.decoder.embed_tokens.weight.shape[0] == VOCAB + 6
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight  # tie_word_embeddings: the target table
    model.save_pretrained(tmp_path)
    assert {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"} <= load_file(
        tmp_path / "model.safetensors").keys()
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.model.decoder.embed_tokens.weight
    assert torch.equal(loaded.model.decoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight)
