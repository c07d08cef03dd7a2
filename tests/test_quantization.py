"""int8 inference on the CPU (hf_s2s.quantize_int8 and translate --int8): the linear and recurrent layers really
hold int8 weights, the float32 model is left untouched, greedy decoding of a trained model agrees with float32,
and what int8 cannot do (another device, another dtype, training, saving) is refused with a clear error."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized import dynamic as dynamic_int8
from transformers import AutoConfig, AutoModelForSeq2SeqLM, Seq2SeqTrainer, Seq2SeqTrainingArguments

from hf_s2s import quantize_int8
from hf_s2s.data.synthetic import EOS_ID, FIRST_SYMBOL_ID, PAD_ID, reversal_dataset
from hf_s2s.inference.translate import translate
from hf_s2s.models.loading import load_model, load_tokenizer
from tests.helpers import random_tiny_model, train_reversal
from tests.saved_folders import save_tiny_model_folder

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

ROOT = Path(__file__).resolve().parent.parent
# Both families, and both recurrent layer types (GRU with Bahdanau attention, LSTM with Luong attention).
VARIANTS = {
    "transformer": ("transformer_seq2seq", {}),
    "gru_bahdanau": ("rnn_seq2seq", {"cell_type": "gru", "attention_type": "bahdanau"}),
    "lstm_luong": ("rnn_seq2seq", {"cell_type": "lstm", "attention_type": "luong_general"}),
}
INT8_TYPES = {nn.Linear: dynamic_int8.Linear, nn.GRU: dynamic_int8.GRU, nn.LSTM: dynamic_int8.LSTM}
SYMBOLS = 8  # the reversal task's alphabet
# Sizes and training recipes that learn the reversal task (those of the families' own reversal tests; the
# Transformer needs its 10 epochs to get past the task's plateau). A few seconds each on one thread.
REVERSAL_SIZES = {
    "transformer_seq2seq": {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                            "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128},
    "rnn_seq2seq": {"encoder_embedding_size": 32, "decoder_embedding_size": 32, "encoder_hidden_size": 32,
                    "decoder_hidden_size": 64, "attention_size": 32},
}
REVERSAL_RECIPES = {"transformer_seq2seq": {"epochs": 10, "learning_rate": 1e-3},
                    "rnn_seq2seq": {"num_train": 1500, "epochs": 3, "learning_rate": 1e-2}}


def random_model(variant: str) -> nn.Module:
    model_type, overrides = VARIANTS[variant]
    return random_tiny_model(model_type, FIRST_SYMBOL_ID + SYMBOLS, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
                             **overrides)


@pytest.fixture(scope="module", params=list(VARIANTS))
def trained(request, tmp_path_factory):
    """(float32 model of the variant trained on reversal, its greedy exact match on held-out sequences)."""
    model_type, overrides = VARIANTS[request.param]
    config = AutoConfig.for_model(model_type, vocab_size=FIRST_SYMBOL_ID + SYMBOLS, dropout=0.0,
                                  **REVERSAL_SIZES[model_type], **overrides)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config)
    exact_match = train_reversal(model, tmp_path_factory.mktemp("reversal"), num_symbols=SYMBOLS,
                                 **REVERSAL_RECIPES[model_type])
    return model.eval(), exact_match


def reversal_batch(count: int = 100, seed: int = 7) -> dict[str, torch.Tensor]:
    """Right-padded reversal sources of 3 to 6 symbols and their attention mask."""
    sources = reversal_dataset(count, num_symbols=SYMBOLS, max_len=6, seed=seed)["input_ids"]
    width = max(len(s) for s in sources)
    input_ids = torch.tensor([s + [PAD_ID] * (width - len(s)) for s in sources])  # (count, width)
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD_ID).long()}


def generate(model, batch, **kwargs) -> list[list[int]]:
    """Each row's generated tokens up to and including its first </s> (the decoder start token dropped)."""
    with torch.no_grad():
        sequences = model.generate(**batch, max_new_tokens=8, pad_token_id=PAD_ID, eos_token_id=EOS_ID, **kwargs)
    rows = [row[1:] for row in sequences.tolist()]
    return [row[: row.index(EOS_ID) + 1] if EOS_ID in row else row for row in rows]


def layer_types(model: nn.Module) -> dict[str, type]:
    return {name: type(module) for name, module in model.named_modules()}


# ---- what quantize_int8 makes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_linear_and_recurrent_layers_hold_int8_weights_and_the_float_model_is_untouched(variant):
    model = random_model(variant)
    before_types = layer_types(model)
    before_state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    quantized = quantize_int8(model)

    float_layers = {name: kind for name, kind in before_types.items() if kind in INT8_TYPES}
    recurrent = {"transformer": set(), "gru_bahdanau": {nn.GRU}, "lstm_luong": {nn.LSTM}}[variant]
    assert set(float_layers.values()) == {nn.Linear} | recurrent
    assert "lm_head" in float_layers  # the output layer is among them
    after = dict(quantized.named_modules())
    for name, kind in float_layers.items():
        layer = after[name]
        assert type(layer) is INT8_TYPES[kind], name
        weights = [layer.weight()] if kind is nn.Linear else list(layer.get_weight().values())
        assert weights and all(w.dtype == torch.qint8 for w in weights), name
    assert not [name for name, m in quantized.named_modules() if type(m) in INT8_TYPES], "a float layer is left"
    assert quantized.is_quantized and not quantized.training

    assert layer_types(model) == before_types  # the float32 model: same layers, same weights
    assert all(torch.equal(tensor, before_state[name]) for name, tensor in model.state_dict().items())
    assert not getattr(model, "is_quantized", False)

    in_place = quantize_int8(model, inplace=True)
    assert in_place is model and type(model.lm_head) is dynamic_int8.Linear


@pytest.mark.slow
def test_greedy_int8_agrees_with_float32_on_a_trained_model(trained):
    """A model that has learned the task (exact match >= 0.9, so its outputs differ from sentence to sentence and
    the comparison has teeth) keeps its greedy tokens under int8: >= 95% of the sentences are the float32
    tokens exactly, and the task is solved as well as in float32 (within 3 points of exact match)."""
    model, float_exact_match = trained
    assert float_exact_match >= 0.9
    batch = reversal_batch()
    references = [row[: row.index(EOS_ID)][::-1] + [EOS_ID] for row in batch["input_ids"].tolist()]
    expected = generate(model, batch)
    got = generate(quantize_int8(model), batch)
    same = sum(a == b for a, b in zip(got, expected, strict=True)) / len(expected)
    assert same >= 0.95, f"int8 differs from float32 on {1 - same:.0%} of the sentences"
    solved = [sum(a == r for a, r in zip(rows, references, strict=True)) / len(references) for rows in (expected, got)]
    assert solved[0] >= 0.9 and solved[1] >= solved[0] - 0.03, solved


@pytest.mark.slow
@pytest.mark.parametrize("num_beams", [1, 3])
def test_int8_batched_generation_equals_each_sentence_alone(trained, num_beams):
    """Padding, packed sequences (the RNN encoder) and beam reordering go through the int8 layers as through the
    float32 ones. Not a guarantee for every model: dynamic quantization scales each layer's input by its largest
    value over the whole batch, so a sentence's activations are rounded differently in another batch; a model as
    sure of its tokens as this one never flips a token for it, the Multi30k Transformer does for some sentences
    (README, int8 section)."""
    model, _ = trained
    quantized = quantize_int8(model)
    batch = reversal_batch(count=24, seed=11)
    together = generate(quantized, batch, num_beams=num_beams)
    alone = []
    for row, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True):
        length = int(mask.sum())
        alone += generate(quantized, {"input_ids": row[None, :length], "attention_mask": mask[None, :length]},
                          num_beams=num_beams)
    assert together == alone


# ---- refusals ---------------------------------------------------------------------------------------------------


def test_a_model_off_the_cpu_in_another_dtype_or_already_quantized_is_refused_untouched():
    model = random_model("gru_bahdanau")
    with pytest.raises(ValueError, match=r"CPU only .* the model is on meta: move it with model.to\('cpu'\)"):
        quantize_int8(random_model("transformer").to("meta"))
    with pytest.raises(ValueError, match=r"takes a float32 model; its layers hold torch.bfloat16: call model.float"):
        quantize_int8(random_model("transformer").to(torch.bfloat16))
    with pytest.raises(ValueError, match="has no Linear, GRU, LSTM layer: there is nothing to quantize"):
        quantize_int8(nn.Embedding(4, 2))
    quantized = quantize_int8(model, inplace=True)
    with pytest.raises(ValueError, match="already quantized"):
        quantize_int8(quantized)


@pytest.mark.parametrize("variant", ["transformer", "gru_bahdanau"])
def test_training_and_saving_an_int8_model_are_refused(variant, tmp_path):
    quantized = quantize_int8(random_model(variant))
    batch = reversal_batch(count=4)
    quantized.train()
    with pytest.raises(ValueError, match="int8 weights .* runs inference only: call .eval"):
        quantized(**batch, labels=batch["input_ids"])
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "run"), use_cpu=True, report_to=[])
    with pytest.raises(ValueError, match="purely quantized"):  # transformers' own refusal (model.is_quantized)
        Seq2SeqTrainer(model=quantized, args=args)
    with pytest.raises(ValueError, match="cannot be saved: .* save the float32 model"):
        quantized.save_pretrained(tmp_path / "int8")
    assert not (tmp_path / "int8").exists()


# ---- translate --int8 ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["transformer_seq2seq", "rnn_seq2seq"])
def test_translate_int8_decodes_a_saved_folder_as_the_python_api_does(model_type, tmp_path):
    """translate --int8 prints the int8 model's hypotheses and scores, which are not the float32 model's: the
    scores tell them apart even where a tiny model's tokens happen to be the same."""
    folder = save_tiny_model_folder(tmp_path / "model", model_type, seed=3)
    sentences = ["a b c d", "e f", "g h i j", "b a"]
    (tmp_path / "input.txt").write_text("\n".join(sentences) + "\n")
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "translate.py"), str(folder), "--int8", "--beams", "2",
         "--max-new-tokens", "6", "--scores", "--input", str(tmp_path / "input.txt")],
        capture_output=True, text=True, timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]

    def printed(model) -> list[str]:  # the lines the command prints for ``model``
        results = translate(model, load_tokenizer(folder), sentences, num_beams=2, max_new_tokens=6)
        return [f"{hypotheses[0].text}\t{hypotheses[0].score:.4f}" for hypotheses in results]

    # split on "\n" only: a random model's byte-fallback tokens decode to characters splitlines() breaks at
    lines = completed.stdout.split("\n")[:-1]
    assert lines == printed(quantize_int8(load_model(folder)))
    assert lines != printed(load_model(folder))
    assert len({line.split("\t")[0] for line in lines}) > 1  # the outputs differ between sentences
