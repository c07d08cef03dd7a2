"""ONNX export of the Transformer (issue 5): torch.onnx.export (the dynamo exporter, torch's default) of

1. the encoder: input_ids, attention_mask -> last_hidden_state;
2. ONE CACHED DECODER STEP with the self-attention cache given as explicit tensors: decoder_input_ids (B, 1),
   encoder_hidden_states (B, T_src, D), attention_mask (B, T_src), past_keys / past_values
   (decoder_layers, B, H, T_past, d_h) -> logits (B, 1, V), present_keys / present_values
   (decoder_layers, B, H, T_past + 1, d_h). The cross-attention K/V are not cache inputs: each step projects them
   again from encoder_hidden_states (correct, only not precomputed as the PyTorch cache does).

Both run in onnxruntime with batch sizes and lengths other than the export example's (dynamic axes), with padded
sources, and match PyTorch (float32, atol 1e-4); a greedy loop of ONNX steps from an empty cache reproduces
``generate``. Encoder outputs are compared at real tokens only: at padding positions PyTorch's padding-free path
returns zeros and the exported (padded) path computed values, which nothing reads (masked out of cross-attention).

Wrappers are put in eval mode before export: the TorchScript exporter (``dynamo=False``) leaves a model in the
mode of the object it was handed, so a fresh wrapper (training mode) switched an eval model to training mode
after export, and PyTorch, not ONNX, then applied dropout, which looked like an export mismatch of up to 2.5.
"""

import numpy as np
import pytest
import torch

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")  # the dynamo exporter builds the graph with it

from transformers.cache_utils import DynamicCache, EncoderDecoderCache  # noqa: E402

from hf_s2s import TransformerSeq2SeqConfig, TransformerSeq2SeqForConditionalGeneration  # noqa: E402
from hf_s2s.models.transformers_compat import output_cache  # noqa: E402

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

PAD, BOS, EOS = 1, 0, 2
TINY = dict(
    vocab_size=24, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
    decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, init_std=0.1, tie_word_embeddings=False,
    pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS,
)
ATOL = 1e-4
STEP_INPUTS = ("decoder_input_ids", "encoder_hidden_states", "attention_mask", "past_keys", "past_values")


class EncoderForExport(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_ids, attention_mask):
        """(B, T_src), (B, T_src) -> (B, T_src, D)"""
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class DecoderStepForExport(torch.nn.Module):
    """One cached decoding step with the self-attention cache as stacked tensors (layers first)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids, encoder_hidden_states, attention_mask, past_keys, past_values):
        config = self.model.config
        cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
        for layer in range(config.decoder_layers):
            cache.self_attention_cache.update(past_keys[layer], past_values[layer], layer)
        outputs = self.model(
            encoder_outputs=(encoder_hidden_states,), attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids, cache=cache, use_cache=True,
        )
        layers = output_cache(outputs).self_attention_cache.layers
        return outputs.logits, torch.stack([c.keys for c in layers]), torch.stack([c.values for c in layers])


def sources(rows):
    width = max(map(len, rows))
    input_ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    return input_ids, (input_ids != PAD).long()


def empty_past(model, batch_size):
    config = model.config
    head_dim = config.d_model // config.decoder_attention_heads
    return torch.zeros(config.decoder_layers, batch_size, config.decoder_attention_heads, 0, head_dim)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The model, its export wrappers, and onnxruntime sessions of both, exported from batch 2 / T_src 5 / T_past 3."""
    torch.manual_seed(0)
    model = TransformerSeq2SeqForConditionalGeneration._from_config(TransformerSeq2SeqConfig(**TINY)).eval()
    encoder, step = EncoderForExport(model).eval(), DecoderStepForExport(model).eval()
    folder = tmp_path_factory.mktemp("onnx")
    batch, src_len, past_len = torch.export.Dim("batch"), torch.export.Dim("src_len"), torch.export.Dim("past_len")

    input_ids, attention_mask = sources([[5, 9, 13, 7, EOS], [8, 6, EOS]])
    torch.onnx.export(
        encoder, (input_ids, attention_mask), folder / "encoder.onnx", dynamo=True,
        input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
        dynamic_shapes={"input_ids": {0: batch, 1: src_len}, "attention_mask": {0: batch, 1: src_len}},
    )
    with torch.no_grad():
        encoder_hidden_states = encoder(input_ids, attention_mask)
    past = torch.randn(2, model.config.decoder_layers, 2, model.config.decoder_attention_heads, 3, 16)
    torch.onnx.export(
        step, (torch.tensor([[4], [7]]), encoder_hidden_states, attention_mask, past[0], past[1]),
        folder / "decoder_step.onnx", dynamo=True,
        input_names=list(STEP_INPUTS), output_names=["logits", "present_keys", "present_values"],
        dynamic_shapes={"decoder_input_ids": {0: batch}, "encoder_hidden_states": {0: batch, 1: src_len},
                        "attention_mask": {0: batch, 1: src_len}, "past_keys": {1: batch, 3: past_len},
                        "past_values": {1: batch, 3: past_len}},
    )
    assert not model.training  # exporting left the model in eval mode
    sessions = {name: ort.InferenceSession(str(folder / f"{name}.onnx")) for name in ("encoder", "decoder_step")}
    return model, encoder, step, sessions


def run_encoder(sessions, input_ids, attention_mask):
    return sessions["encoder"].run(None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()})[0]


def run_step(sessions, *inputs):
    return sessions["decoder_step"].run(None, {name: x.numpy() for name, x in zip(STEP_INPUTS, inputs, strict=True)})


# Batch 3 and T_src 8 (the export example had 2 and 5), two padded rows.
SOURCES = [[5, 9, 13, 7, 21, 11, 3, EOS], [8, 6, EOS], [17, 4, 10, 12, EOS]]


def test_encoder_matches_pytorch_on_other_shapes_with_padding(exported):
    model, encoder, _, sessions = exported
    for input_ids, attention_mask in [sources(SOURCES), sources([[4, 5, 6, 7, 8, 9, EOS]])]:
        with torch.no_grad():
            expected = encoder(input_ids, attention_mask).numpy()  # (B, T_src, D)
        actual = run_encoder(sessions, input_ids, attention_mask)
        assert actual.shape == expected.shape
        real = attention_mask.bool().numpy()  # (B, T_src)
        np.testing.assert_allclose(actual[real], expected[real], atol=ATOL, rtol=0)


def test_decoder_step_matches_pytorch_on_other_shapes(exported):
    model, encoder, step, sessions = exported
    input_ids, attention_mask = sources(SOURCES)
    with torch.no_grad():
        encoder_hidden_states = encoder(input_ids, attention_mask)
    torch.manual_seed(1)
    past = torch.randn(2, model.config.decoder_layers, 3, model.config.decoder_attention_heads, 6, 16)  # T_past 6
    inputs = (torch.tensor([[4], [9], [3]]), encoder_hidden_states, attention_mask, past[0], past[1])
    with torch.no_grad():
        expected = [x.numpy() for x in step(*inputs)]
    actual = run_step(sessions, *inputs)
    assert [a.shape for a in actual] == [(3, 1, 24), (1, 3, 2, 7, 16), (1, 3, 2, 7, 16)]
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, e, atol=ATOL, rtol=0)


def test_greedy_decoding_with_onnx_steps_equals_generate(exported):
    """ONNX encoder, then ONNX steps from an empty cache, each feeding back its present K/V: the tokens of
    ``generate`` (greedy, cached) and the logits of one teacher-forced PyTorch forward."""
    model, _, _, sessions = exported
    input_ids, attention_mask = sources(SOURCES)
    steps = 8
    with torch.no_grad():
        expected = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False, num_beams=1,
                                  max_new_tokens=steps, min_new_tokens=steps)  # (B, 1 + steps)
    assert len(torch.unique(expected[:, 1:])) >= 3, expected  # a constant output would prove little

    encoder_hidden_states = torch.from_numpy(run_encoder(sessions, input_ids, attention_mask))
    tokens = torch.full((3, 1), BOS)
    past_keys = past_values = empty_past(model, 3)
    all_logits = []
    for _ in range(steps):
        logits, past_keys, past_values = (torch.from_numpy(x) for x in run_step(
            sessions, tokens[:, -1:], encoder_hidden_states, attention_mask, past_keys, past_values))
        all_logits.append(logits)
        next_token = logits[:, -1].masked_fill(torch.arange(24) == EOS, -torch.inf).argmax(-1)  # as min_new_tokens
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
    assert torch.equal(tokens, expected)

    with torch.no_grad():
        teacher_forced = model(input_ids=input_ids, attention_mask=attention_mask,
                               decoder_input_ids=expected[:, :-1]).logits  # (B, steps, V)
    np.testing.assert_allclose(torch.cat(all_logits, dim=1).numpy(), teacher_forced.numpy(), atol=ATOL, rtol=0)
