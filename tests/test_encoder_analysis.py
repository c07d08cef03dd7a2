"""hf_s2s.inference.analysis and its commands: the encoder self-attention maps are the encoder's own
``output_attentions`` (rows sum to 1, padding exactly 0, batched == single) and plot from the API and from
``translate --plot-encoder-attention``; sentence vectors do not depend on the batch, and on a model trained on
Multi30k a sentence is ranked closer to a one-word edit of itself than to unrelated sentences."""

import random
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForSeq2SeqLM

import hf_s2s  # noqa: F401
from hf_s2s.cli import main as cli_main
from hf_s2s.data import corpus as data
from hf_s2s.data.tokenization import train_tokenizer_from_texts
from hf_s2s.inference.analysis import encoder_attention, sentence_embeddings, similarity
from hf_s2s.inference.plots import plot_encoder_attention
from tests.helpers import TINY, random_tiny_model, single_thread
from tests.saved_folders import save_tiny_model_folder, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ["a b c d e f", "g h", "i j a b", "c"]  # different lengths: every batch has padding


@pytest.fixture(autouse=True)
def one_thread():
    with single_thread():
        yield


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def tiny(model_type, tokenizer, **config):
    return random_tiny_model(model_type, len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                             bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                             decoder_start_token_id=tokenizer.bos_token_id, **config)


def run_script(name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args], input=stdin,
                          capture_output=True, text=True, timeout=180)


# ---- encoder self-attention ---------------------------------------------------------------------------------


def test_encoder_attention_is_the_encoders_own_with_padding_zero_and_batched_equal_to_single(tokenizer):
    model = tiny("transformer_seq2seq", tokenizer, encoder_layers=2)
    model.set_attn_implementation("sdpa")  # returns no weights: switched to eager for the pass, and back
    weights, tokens = encoder_attention(model, tokenizer, SENTENCES)
    assert model.config._attn_implementation == "sdpa"
    lengths = [len(t) for t in tokens]
    assert tokens[1] == tokenizer.convert_ids_to_tokens(tokenizer("g h")["input_ids"])
    assert weights.shape == (len(SENTENCES), 2, 2, max(lengths), max(lengths))  # (N, layers, heads, S, S)

    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    model.set_attn_implementation("eager")
    with torch.no_grad():
        expected = torch.stack(model.get_encoder()(**batch, output_attentions=True).attentions, dim=1)
    for n, length in enumerate(lengths):
        real = weights[n, :, :, :length, :length]
        torch.testing.assert_close(real, expected[n, :, :, :length, :length])
        torch.testing.assert_close(real.sum(-1), torch.ones(2, 2, length))
        assert (weights[n, :, :, :, length:] == 0).all() and (weights[n, :, :, length:, :] == 0).all()
        alone, alone_tokens = encoder_attention(model, tokenizer, [SENTENCES[n]])
        assert alone_tokens == [tokens[n]]
        torch.testing.assert_close(alone[0], real, atol=1e-6, rtol=0)
    assert not torch.allclose(weights[0, 0, 0], weights[0, 0, 1])  # the heads differ: not a uniform map


def test_an_rnn_has_no_encoder_self_attention(tokenizer):
    with pytest.raises(ValueError, match=r"\(rnn_seq2seq\) has no encoder self-attention: its encoder is a GRU"):
        encoder_attention(tiny("rnn_seq2seq", tokenizer), tokenizer, ["a b"])


def test_plot_draws_one_panel_per_layer_or_the_one_asked_for(tokenizer, tmp_path):
    model = tiny("transformer_seq2seq", tokenizer, encoder_layers=3)
    weights, tokens = encoder_attention(model, tokenizer, ["a b c"])
    grid = plot_encoder_attention(weights[0], tokens[0], tmp_path / "grid.png", title="a b c")
    single = plot_encoder_attention(weights[0], tokens[0], tmp_path / "single.png", layer=2, head=1)
    grid_height, grid_width = matplotlib.image.imread(grid).shape[:2]
    height, width = matplotlib.image.imread(single).shape[:2]
    assert grid_height == height and grid_width == 3 * width
    with pytest.raises(ValueError, match=r"layer \(--layer\) 3 is out of range: the encoder has 3 layers, numbered "
                                         r"0 to 2"):
        plot_encoder_attention(weights[0], tokens[0], tmp_path / "x.png", layer=3)
    with pytest.raises(ValueError, match=r"head \(--head\) -1 is out of range: .* 2 heads per layer"):
        plot_encoder_attention(weights[0], tokens[0], tmp_path / "x.png", head=-1)
    assert not (tmp_path / "x.png").exists()


def cli_error(*argv: str) -> str:
    """The one error line a command exits with."""
    with pytest.raises(SystemExit) as exit_info:
        cli_main(list(argv))
    return str(exit_info.value.code)


def test_translate_plots_encoder_attention_and_refuses_what_it_cannot_draw(tokenizer, tmp_path, capsys):
    folder = save_tiny_model_folder(tmp_path / "transformer", "transformer_seq2seq", tokenizer)
    png = tmp_path / "enc.png"
    assert cli_main(["translate", str(folder), "--plot-encoder-attention", str(png), "--layer", "0", "--head", "1",
                     "--sentence", "a b c"]) == 0
    assert "encoder self-attention over 4 source tokens" in capsys.readouterr().err and png.stat().st_size > 0
    no_png = str(tmp_path / "no.png")
    assert cli_error("translate", str(folder), "--plot-encoder-attention", no_png, "--layer", "1", "--sentence",
                     "a b").startswith("error: layer (--layer) 1 is out of range: the encoder has 1 layer, numbered 0 to 0")
    rnn = save_tiny_model_folder(tmp_path / "rnn", "rnn_seq2seq", tokenizer)
    assert "has no encoder self-attention" in cli_error("translate", str(rnn), "--plot-encoder-attention", no_png,
                                                        "--sentence", "a")
    unused = cli_error("translate", str(tmp_path / "no-such-model"), "--head", "0", "--sentence", "a")  # before loading
    assert "--layer and --head choose what --plot-encoder-attention draws" in unused
    assert not (tmp_path / "no.png").exists()


# ---- sentence vectors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", list(TINY))
def test_sentence_vectors_are_the_mean_memory_and_do_not_depend_on_the_batch(tokenizer, model_type):
    model = tiny(model_type, tokenizer)
    vectors = sentence_embeddings(model, tokenizer, SENTENCES, batch_size=3)
    assert vectors.shape == (len(SENTENCES), model.get_encoder()(**tokenizer(["a"], return_tensors="pt"))
                             .last_hidden_state.shape[-1])
    for n, sentence in enumerate(SENTENCES):
        with torch.no_grad():
            memory = model.get_encoder()(**tokenizer([sentence], return_tensors="pt")).last_hidden_state[0]  # (S, E)
        torch.testing.assert_close(vectors[n], memory.mean(dim=0), atol=1e-5, rtol=0)
        torch.testing.assert_close(sentence_embeddings(model, tokenizer, [sentence])[0], vectors[n], atol=1e-5, rtol=0)
    cosines = similarity(model, tokenizer, SENTENCES, SENTENCES[::-1], batch_size=2)
    torch.testing.assert_close(cosines, torch.nn.functional.cosine_similarity(vectors, vectors.flip(0)))
    with pytest.raises(ValueError, match=r"compares pairs: got 2 first and 1 second"):
        similarity(model, tokenizer, ["a", "b"], ["c"])
    with pytest.raises(ValueError, match=r"batch_size \(--batch-size\) must be a whole number >= 1, got 0"):
        sentence_embeddings(model, tokenizer, ["a"], batch_size=0)


@pytest.mark.slow
def test_similarity_command_prints_one_cosine_per_pair_and_names_a_bad_line(tokenizer, tmp_path):
    folder = save_tiny_model_folder(tmp_path / "rnn", "rnn_seq2seq", tokenizer)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a b c\ta b c\na b c\tg h\n")
    done = run_script("similarity", str(folder), "--input", str(pairs))
    assert done.returncode == 0, done.stderr
    same, different = (float(line) for line in done.stdout.splitlines())
    assert same == 1.0 and -1.0 <= different < 1.0
    pairs.write_text("a b\tc\nno tab here\n")
    bad = cli_error("similarity", str(tmp_path / "no-such-model"), "--input", str(pairs))  # refused before loading
    assert "pairs.tsv, line 2, holds 0 tabs: expected one sentence pair a line" in bad


@pytest.mark.parametrize(("line", "message"), [
    ("a b\t", "line 2: the second sentence is empty"),
    ("\ta b", "line 2: the first sentence is empty"),
    ("\u200b\u200b\t ", "line 2: the first and the second sentence are empty"),
], ids=["second", "first", "both-invisible"])
def test_similarity_command_refuses_an_empty_sentence_naming_the_line(tmp_path, line, message):
    """An empty sentence has no meaning to compare: its vector would be </s> alone (1.0 against another empty one,
    0.97 against a real sentence under an untrained encoder). Refused before the model loads."""
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"a b\tc d\n{line}\n")
    error = cli_error("similarity", str(tmp_path / "no-such-model"), "--input", str(pairs))
    assert error.startswith(f"error: {pairs}, {message}; every pair needs two sentences to compare"), error


def test_sentence_vectors_of_blank_sentences_are_refused(tokenizer):
    model = tiny("transformer_seq2seq", tokenizer)
    with pytest.raises(ValueError, match=r"got 2 blank sentence\(s\), at position\(s\) 1, 2 \(from 0\)"):
        sentence_embeddings(model, tokenizer, ["a b", "", "\u200b"])
    with pytest.raises(ValueError, match=r"got 1 blank sentence"):
        similarity(model, tokenizer, ["a b"], [" "])


def test_similarity_command_refuses_a_tokenizer_larger_than_the_embedding_table(tokenizer, tmp_path):
    folder = save_tiny_model_folder(tmp_path / "model", "rnn_seq2seq", tokenizer)
    grown = tiny_tokenizer()
    grown.add_tokens([f"extra{i}" for i in range(20)])
    grown.save_pretrained(folder)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a b\tc d\n")
    error = cli_error("similarity", str(folder), "--input", str(pairs))
    assert error.startswith(f"error: {folder}: tokenizer does not fit the model config: the source tokenizer has "
                            f"{len(tokenizer) + 20} tokens but config.vocab_size is {len(tokenizer)}"), error


# ---- a model trained on Multi30k ------------------------------------------------------------------------------


def one_word_dropped(sentence: str, rng: random.Random) -> str:
    words = sentence.split()
    del words[rng.randrange(len(words))]
    return " ".join(words)


@pytest.mark.slow
def test_trained_encoder_puts_an_edited_sentence_closer_than_an_unrelated_one():
    """Multi30k task 1 has one caption per image, so no real paraphrases: each of 300 test sentences with one word
    dropped stands in, and the other 299 edits are the unrelated sentences (edits too, so the right one is not
    told by its length).

    The property is an ordering, not a cosine level. A trained encoder's mean-pooled vectors share a large common
    direction, and how large depends on the training trajectory, which float rounding steers: over 21 runs (seeds 0
    to 6, each with ATEN_CPU_CAPABILITY avx512, avx2 and default) the mean cosine of unrelated pairs ranged from
    0.60 to 0.98, on either side of the untrained encoder's 0.78 to 0.81, so no fixed margin on cosines (nor a
    comparison with the untrained encoder) holds on every x86 CPU. A rank compares cosines within one run only,
    wherever their level sits. In those runs the edit beat an unrelated sentence in 93% to 99% of the comparisons
    and was the nearest of all 300 for 71% to 94% of the sentences. A broken analysis cannot pass: random vectors
    win half the comparisons and are nearest for 1 in 300, constant ones win none (ties count as losses), vectors
    returned in batch order instead of sentence order win about 55%."""
    folder = data.resolve_data_dir()
    if folder is None:
        pytest.skip("Multi30k not found (set HF_S2S_DATA_DIR)")
    corpus = data.load_text_folder(folder, "de", "en")
    train = corpus["train"].select(range(4000))["translation"]
    sources, targets = [pair["de"] for pair in train], [pair["en"] for pair in train]
    tokenizer = train_tokenizer_from_texts(sources + targets, vocab_size=1000)
    config = AutoConfig.for_model(
        "transformer_seq2seq", **{**TINY["transformer_seq2seq"], "d_model": 64, "encoder_ffn_dim": 128,
                                  "decoder_ffn_dim": 128, "dropout": 0.0}, vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.bos_token_id)
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(config)

    rng = random.Random(0)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(200):
        rows = [rng.randrange(len(sources)) for _ in range(32)]
        batch = tokenizer([sources[i] for i in rows], text_target=[targets[i] for i in rows], padding=True,
                          return_tensors="pt")
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 4.5  # it learned something (about 8 at the start)

    test = [pair["de"] for pair in corpus["test"].select(range(300))["translation"]]
    edited = [one_word_dropped(sentence, rng) for sentence in test]
    cosines = F.cosine_similarity(sentence_embeddings(model, tokenizer, test)[:, None, :],
                                  sentence_embeddings(model, tokenizer, edited)[None, :, :], dim=-1)  # (300, 300)
    own = cosines.diagonal()[:, None]  # (300, 1): sentence i against its own edit
    unrelated = ~torch.eye(len(test), dtype=torch.bool)  # (300, 300)
    beaten_by = ((cosines >= own) & unrelated).sum(dim=1)  # (300,): unrelated edits at least as close as its own
    wins = 1 - beaten_by.sum() / unrelated.sum()  # chance: 0.5
    nearest = (beaten_by == 0).float().mean()  # chance: 1 / 300
    assert wins >= 0.85 and nearest >= 0.5, f"the edit wins {wins:.3f} of comparisons, nearest for {nearest:.3f}"
