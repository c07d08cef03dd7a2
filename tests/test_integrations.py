"""The doors of the Hugging Face stack, on tiny models with a tiny trained tokenizer: the shipped translation
pipeline (batched == single == generate), Seq2SeqTrainer fine-tuning of a folder loaded through the Auto classes,
resize_token_embeddings after adding tokens, PEFT LoRA on the Transformer's attention projections, torch.compile
and ONNX export (encoder + one decoder step) run in onnxruntime."""

import pytest
import torch
from datasets import Dataset
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    pipeline,
)

import hf_s2s  # noqa: F401
from hf_s2s.data.synthetic import text_reversal_corpus
from hf_s2s.data.tokenization import train_tokenizer_from_texts
from hf_s2s.hub.publish import build_hub_folder
from tests.helpers import TINY, random_tiny_model

# also run by CI on the oldest supported releases (constraints/oldest.txt)
pytestmark = pytest.mark.compat

# On top of the shared tiny sizes: an untied Transformer, so that the output layer is not the input table.
OVERRIDES = {"transformer_seq2seq": {"tie_word_embeddings": False, "init_std": 0.1}, "rnn_seq2seq": {}}
FAMILIES = pytest.mark.parametrize("model_type", list(TINY))
SOURCES = ["a b c d e f", "g h", "i j k", "b"]
GENERATE = {"max_new_tokens": 8, "do_sample": False}


@pytest.fixture(scope="module")
def corpus():
    return text_reversal_corpus(num_train=300, num_validation=0, num_test=0, seed=0)["train"]


@pytest.fixture(scope="module")
def tokenizer(corpus):
    texts = [pair[side] for pair in corpus["translation"] for side in ("src", "tgt")]
    return train_tokenizer_from_texts(texts, vocab_size=280)


@pytest.fixture(scope="module")
def saved(tokenizer, tmp_path_factory):
    """Per family: a saved model folder (save_pretrained + tokenizer) with a card, and its Hub folder."""
    folders = {}
    for model_type in TINY:
        model_dir = tmp_path_factory.mktemp(model_type) / "model"
        random_tiny_model(model_type, len(tokenizer), **OVERRIDES[model_type]).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        (model_dir / "README.md").write_text("---\nlicense: apache-2.0\nlibrary_name: transformers\ntags: [test]\n---\n")
        folders[model_type] = (model_dir, build_hub_folder(model_dir, model_dir.parent / "hub"))
    return folders


def generate_texts(model, tokenizer, sources, **kwargs):
    texts = []
    for source in sources:  # one at a time: no padding involved
        batch = tokenizer([source], return_tensors="pt")
        with torch.no_grad():
            output = model.generate(**batch, **GENERATE, **kwargs)
        texts.append(tokenizer.decode(output[0], skip_special_tokens=True))
    return texts


# ---------------------------------------------------------------------------------------------- pipelines


def test_transformers_5_removed_the_builtin_translation_pipelines():
    """Why the Hub folder ships its own pipeline: the stock tasks are gone in transformers 5."""
    for task in ("translation", "text2text-generation"):
        with pytest.raises(KeyError, match="has been removed"):
            pipeline(task)


@pytest.mark.slow
@FAMILIES
def test_shipped_pipelines_batched_equal_single_and_generate(saved, tokenizer, model_type):
    model_dir, hub_folder = saved[model_type]
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    expected = generate_texts(model, tokenizer, SOURCES)
    expected_beam = generate_texts(model, tokenizer, SOURCES, num_beams=3)
    assert len(set(expected)) > 1
    translator = pipeline("translation", model=str(hub_folder), trust_remote_code=True)
    text2text = pipeline("text2text-generation", model=str(hub_folder), trust_remote_code=True)
    assert [r["translation_text"] for r in translator(SOURCES, batch_size=3, **GENERATE)] == expected
    assert [r["translation_text"] for r in translator(SOURCES, batch_size=1, **GENERATE)] == expected
    assert [r["generated_text"] for r in text2text(SOURCES, batch_size=4, **GENERATE)] == expected
    assert [r["translation_text"] for r in translator(SOURCES, batch_size=4, num_beams=3, **GENERATE)] == expected_beam
    # one string in, a list of hypotheses out; n-best passes through to generate
    nbest = translator(SOURCES[0], num_beams=3, num_return_sequences=2, **GENERATE)
    assert len(nbest) == 2 and nbest[0]["translation_text"] == expected_beam[0]


def test_shipped_pipeline_takes_truncation_as_the_tokenizers_as_transformers_4_did(saved, tokenizer):
    """``truncation`` cuts the source (to max_source_length, else the tokenizer's model_max_length) instead of reaching
    generate(), which refused it ("model_kwargs are not used"): evaluate's translation evaluator passes
    truncation=True."""
    model_dir, hub_folder = saved["transformer_seq2seq"]
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    translator = pipeline("translation", model=str(hub_folder), trust_remote_code=True)
    assert [r["translation_text"] for r in translator(SOURCES, truncation=True, **GENERATE)] == \
        generate_texts(model, tokenizer, SOURCES)
    long_source = " ".join(["a b c d e f g h"] * 4)
    cut = tokenizer([long_source], truncation=True, max_length=4, return_tensors="pt")
    assert cut.input_ids.shape[1] == 4 < len(tokenizer(long_source).input_ids)
    with torch.no_grad():
        expected = tokenizer.decode(model.generate(**cut, **GENERATE)[0], skip_special_tokens=True)
    assert translator(long_source, truncation=True, max_source_length=4, **GENERATE)[0]["translation_text"] == expected
    translator.tokenizer.model_max_length = 4  # truncation=True alone cuts to the tokenizer's limit
    assert translator(long_source, truncation=True, **GENERATE)[0]["translation_text"] == expected
    with pytest.raises(ValueError, match="max_source_length=4 cuts the source, truncation=False says not to"):
        translator(long_source, truncation=False, max_source_length=4)


# ---------------------------------------------------------------------------------------------- Trainer


@pytest.mark.slow
@FAMILIES
def test_seq2seq_trainer_fine_tunes_a_folder_loaded_through_auto_classes(saved, tokenizer, corpus, model_type,
                                                                         tmp_path):
    model = AutoModelForSeq2SeqLM.from_pretrained(saved[model_type][0])
    pairs = corpus.select(range(64))["translation"]
    features = tokenizer([p["src"] for p in pairs], text_target=[p["tgt"] for p in pairs])
    dataset = Dataset.from_dict({"input_ids": features["input_ids"], "labels": features["labels"]})
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), max_steps=12, per_device_train_batch_size=16, per_device_eval_batch_size=64,
        learning_rate=3e-3, warmup_steps=0, lr_scheduler_type="constant", report_to=[], use_cpu=True, seed=0,
        disable_tqdm=True, save_strategy="no", eval_strategy="no", logging_strategy="no",
    )
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=dataset, eval_dataset=dataset,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model), processing_class=tokenizer)
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]
    assert after < 0.8 * before


# ---------------------------------------------------------------------------------------------- resize


@FAMILIES
def test_resize_token_embeddings_after_adding_tokens(saved, tokenizer, model_type, tmp_path):
    model = AutoModelForSeq2SeqLM.from_pretrained(saved[model_type][0]).eval()
    grown = AutoTokenizer.from_pretrained(saved[model_type][0])
    old_size = len(grown)
    grown.add_tokens(["<term1>", "<term2>", "<term3>"])
    batch = tokenizer(SOURCES[:2], return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[1, 10, 11, 12], [1, 13, 14, 15]])
    with torch.no_grad():
        before = model(**batch, decoder_input_ids=decoder_input_ids).logits
    model.resize_token_embeddings(len(grown))
    new_size = old_size + 3
    assert model.get_input_embeddings().weight.shape[0] == new_size
    assert model.get_output_embeddings().weight.shape[0] == new_size
    assert model.model.decoder.embed_tokens is None or model.model.decoder.embed_tokens.weight.shape[0] == new_size
    assert model.config.vocab_size == new_size
    assert getattr(model.config, "decoder_vocab_size", None) in (None, new_size)
    with torch.no_grad():
        after = model(**batch, decoder_input_ids=decoder_input_ids).logits
    assert after.shape[-1] == new_size
    torch.testing.assert_close(after[..., :old_size], before, rtol=0, atol=1e-6)  # old tokens unchanged
    # the new tokens work on both sides: in the source, and fed back into the decoder
    source = grown(["a <term2> b"], return_tensors="pt")
    assert source["input_ids"].max().item() >= old_size
    with torch.no_grad():
        logits = model(**source, decoder_input_ids=torch.tensor([[1, new_size - 1]])).logits
        output = model.generate(**source, **GENERATE)
    assert logits.shape == (1, 2, new_size) and output.shape[0] == 1
    # and the resized model saves and loads back with the new sizes
    model.save_pretrained(tmp_path / "resized")
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "resized").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**source, decoder_input_ids=torch.tensor([[1, new_size - 1]])).logits,
                                   logits, rtol=0, atol=0)


def test_resize_refuses_separate_vocabularies_of_different_sizes(tokenizer):
    config = AutoConfig.for_model("transformer_seq2seq", **TINY["transformer_seq2seq"],
                                  **OVERRIDES["transformer_seq2seq"], vocab_size=40,
                                  decoder_vocab_size=50, share_encoder_decoder_embeddings=False)
    model = AutoModelForSeq2SeqLM.from_config(config)
    with pytest.raises(ValueError, match="vocab_size=40 and decoder_vocab_size=50"):
        model.resize_token_embeddings(45)


# ---------------------------------------------------------------------------------------------- PEFT LoRA


def test_peft_lora_on_transformer_attention_trains_and_merges(saved, tokenizer, corpus):
    peft = pytest.importorskip("peft")
    model = AutoModelForSeq2SeqLM.from_pretrained(saved["transformer_seq2seq"][0])
    # self-attention projects Q, K, V with one fused matrix (qkv_proj); cross-attention has q_proj and kv_proj
    projections = ["qkv_proj", "q_proj", "kv_proj", "out_proj"]
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=projections, init_lora_weights=True)
    lora = peft.get_peft_model(model, config)
    trainable = {name for name, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    assert {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trainable} == set(projections)
    frozen_before = {n: p.detach().clone() for n, p in lora.named_parameters() if not p.requires_grad}

    pairs = corpus.select(range(32))["translation"]
    batch = tokenizer([p["src"] for p in pairs], text_target=[p["tgt"] for p in pairs], return_tensors="pt",
                      padding=True)
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-2)
    lora.train()
    torch.manual_seed(0)
    losses = []
    for _ in range(15):
        loss = lora(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0]
    for name, p in lora.named_parameters():
        if name in frozen_before:
            assert torch.equal(p, frozen_before[name]), f"{name} changed though frozen"

    lora.eval()
    probe = {k: v for k, v in batch.items() if k != "labels"}
    decoder_input_ids = lora.prepare_decoder_input_ids_from_labels(batch["labels"])
    with torch.no_grad():
        adapted = lora(**probe, decoder_input_ids=decoder_input_ids).logits
        with lora.disable_adapter():
            base = lora(**probe, decoder_input_ids=decoder_input_ids).logits
        merged_model = lora.merge_and_unload()
        merged = merged_model(**probe, decoder_input_ids=decoder_input_ids).logits
    assert (adapted - base).abs().max() > 1e-2  # the adapter changed the model
    torch.testing.assert_close(merged, adapted, rtol=1e-4, atol=1e-4)  # merged == unmerged adapter
    assert type(merged_model).__name__ == "TransformerSeq2SeqForConditionalGeneration"
    assert not any("lora_" in name for name, _ in merged_model.named_parameters())


# ---------------------------------------------------------------------------------------------- torch.compile


@pytest.mark.slow
def test_torch_compile_forward_matches_eager(saved, tokenizer):
    """Inductor on CPU (gcc is present here). Tiny model; compiling still takes about a minute on shared cores."""
    model = AutoModelForSeq2SeqLM.from_pretrained(saved["transformer_seq2seq"][0]).eval()
    batch = tokenizer(SOURCES, return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[1, 10, 11], [1, 12, 13], [1, 14, 15], [1, 16, 17]])
    with torch.no_grad():
        expected = model(**batch, decoder_input_ids=decoder_input_ids, use_cache=False).logits
        compiled = torch.compile(model, backend="inductor")
        actual = compiled(**batch, decoder_input_ids=decoder_input_ids, use_cache=False).logits
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True, scope="module")
def _reset_dynamo():
    yield
    torch._dynamo.reset()


def test_hub_folder_fixture_is_self_contained(saved):
    """The folders the doors above load hold no pickled weights (safetensors only)."""
    for _, hub_folder in saved.values():
        assert (hub_folder / "model.safetensors").is_file()
        assert not list(hub_folder.glob("*.bin"))
