"""Helpers shared by the model tests: a fresh process where hf_s2s cannot be imported, training on the
synthetic reversal task through the real Seq2SeqTrainer, and generation continued from a returned cache."""

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import EncoderDecoderCache, Seq2SeqTrainer, Seq2SeqTrainingArguments

from hf_s2s.data.corpus import resolve_data_dir
from hf_s2s.data.synthetic import EOS_ID, PAD_ID, PaddingCollator, reversal_dataset
from hf_s2s.models.transformers_compat import CACHE_NAME, output_cache

# Tiny model configs of both families for pipeline-level tests (training runs, Hub folders).
TINY = {
    "transformer_seq2seq": {"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
                            "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64},
    "rnn_seq2seq": {"encoder_embedding_size": 16, "decoder_embedding_size": 16, "encoder_hidden_size": 16,
                    "decoder_hidden_size": 32, "attention_size": 16},
}
FAMILIES = tuple(TINY)  # the two model families, for tests parametrized over both

@contextmanager
def single_thread():
    """Torch on one thread inside the block: tiny models on a shared CPU only lose to more threads (contention)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)



def default_ctrl_c() -> None:
    """``preexec_fn`` of a process a test stops with SIGINT: a shell starts its background jobs with SIGINT ignored
    (a CI script run with ``&``, say), Python then never turns it into KeyboardInterrupt, and the process would run
    on; the child gets the default a terminal gives."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def multi30k_lines(name: str) -> list[str]:
    """The lines of one file of the real Multi30k (``"val.de.gz"``), found as the checkout's scripts find it; the test
    skips where the corpus is not there."""
    folder = resolve_data_dir()
    if folder is None:
        pytest.skip("Multi30k not found (set HF_S2S_DATA_DIR)")
    with gzip.open(folder / name, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def random_tiny_model(model_type: str, vocab_size: int, seed: int = 0, attn_implementation: str | None = None,
                      **config_overrides):
    """A random tiny model (``TINY`` sizes) whose greedy outputs differ between inputs: a tiny model at its
    init repeats one token for every input, which would make equality tests toothless, so every matrix is
    redrawn with a larger std. Returned in eval mode."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    config = AutoConfig.for_model(model_type, **{**TINY[model_type], "vocab_size": vocab_size, **config_overrides})
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation=attn_implementation)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                torch.nn.init.normal_(parameter, std=0.3)
    return model.eval()


# Prepended to every script run by `run_without_hf_s2s`: hf_s2s is made unimportable, as where it is not installed
# (the editable install is on the path otherwise): a finder ahead of every other one raises ImportError for hf_s2s
# and its submodules. The script proves it before doing anything.
_BLOCK_HF_S2S = """
import sys


class _HfS2sIsNotInstalled:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "hf_s2s" or name.startswith("hf_s2s."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: a user without hf_s2s)", name=name)
        return None


sys.meta_path.insert(0, _HfS2sIsNotInstalled)
try:
    import hf_s2s  # noqa: F401
except ImportError:
    pass
else:
    raise SystemExit("hf_s2s is importable in the fresh process")
"""


def tokenized_toolkit_fixtures(pattern: str) -> list[Path]:
    """The folders of tests/fixtures/toolkits matching ``pattern`` whose test set is tokenized text (they hold
    test.de). The *_spm ones take raw text through their SentencePiece model, whose recorded path exists only where
    the toolkit trained: tests/test_importers_subwords.py converts them with the model given."""
    folders = (Path(__file__).parent / "fixtures" / "toolkits").glob(pattern)
    return sorted(path for path in folders if (path / "test.de").is_file())


# The special ids of the lexical tests' tiny models (tests/test_shortlist.py, tests/test_term_constraints.py).
LEXICAL_VOCAB, LEXICAL_PAD, LEXICAL_START, LEXICAL_EOS = 50, 0, 1, 2


def lexical_tiny_model(model_type: str):
    """The tiny random model both lexical test files decode: ``LEXICAL_VOCAB`` tokens with the special ids above."""
    return random_tiny_model(model_type, LEXICAL_VOCAB, seed=3, pad_token_id=LEXICAL_PAD, bos_token_id=LEXICAL_START,
                             decoder_start_token_id=LEXICAL_START, eos_token_id=LEXICAL_EOS)


def run_without_hf_s2s(script: str, cwd: Path, timeout: int = 300):
    """Run ``script`` in a new Python process where hf_s2s cannot be imported, offline, with its own HF_HOME
    (so the remote code is copied there afresh) and stdin closed. The script must print one JSON document as its last line of
    stdout; it is returned parsed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(Path(cwd) / "fresh_hf_home"), TOKENIZERS_PARALLELISM="false")
    completed = subprocess.run(  # stdin closed: a prompt (transformers' "run the custom code?") fails, never waits
        [sys.executable, "-c", _BLOCK_HF_S2S + textwrap.dedent(script)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )
    if completed.returncode != 0:
        raise AssertionError(f"fresh process failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def generate_without_hf_s2s(folder: Path, sources: list[str], cwd: Path, **generate_kwargs) -> list[list[int]]:
    """The token ids ``generate(**generate_kwargs)`` gives for ``sources`` on ``folder`` loaded with
    ``trust_remote_code=True`` in a process where hf_s2s cannot be imported (:func:`run_without_hf_s2s`)."""
    return run_without_hf_s2s(f"""
        import json, torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        model = AutoModelForSeq2SeqLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        batch = tokenizer({sources!r}, return_tensors="pt", padding=True)
        with torch.no_grad():
            print(json.dumps(model.generate(**batch, **{generate_kwargs!r}).tolist()))
    """, cwd=cwd)


def assert_generates_alike_without_hf_s2s(model, tokenizer, folder: Path, sources: list[str], cwd: Path,
                                          **generate_kwargs) -> None:
    """``model`` (loaded from ``folder`` with hf_s2s) and ``folder`` loaded where hf_s2s cannot be imported give the
    same ``generate(**generate_kwargs)`` ids for ``sources``."""
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model.generate(**batch, **generate_kwargs).tolist()
    assert generate_without_hf_s2s(folder, sources, cwd, **generate_kwargs) == expected


def translate_command_lines(folder: Path, sources: list[str], cwd: Path, *options: str) -> list[str]:
    """The output lines of ``hf-s2s translate FOLDER --input FILE *options`` run as a process on ``sources`` (one a
    line in FILE, written in ``cwd``); fails the test unless the command exits with 0."""
    source = cwd / "in.txt"
    source.write_text("\n".join(sources) + "\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "hf_s2s.cli", "translate", str(folder), "--input", str(source),
                           *options], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def train_reversal(model, output_dir, num_symbols=8, max_len=6, num_train=3000, epochs=8, batch_size=32,
                   learning_rate=3e-3, seed=0):
    """Train ``model`` on the reversal task with Seq2SeqTrainer and return exact match of greedy generation
    (predict_with_generate) on held-out sequences."""
    train = reversal_dataset(num_train, num_symbols=num_symbols, max_len=max_len, seed=seed)
    held_out = reversal_dataset(200, num_symbols=num_symbols, max_len=max_len, seed=seed + 1)
    seen = {tuple(x) for x in train["input_ids"]}
    held_out = held_out.filter(lambda ex: tuple(ex["input_ids"]) not in seen)

    def exact_match(prediction):
        predictions, labels = prediction.predictions, prediction.label_ids
        hits = 0
        for pred, label in zip(predictions, labels, strict=True):
            label = [t for t in label.tolist() if t not in (PAD_ID, -100)]  # Seq2SeqTrainer pads label_ids with pad
            pred = [t for t in pred.tolist()[1:] if t not in (PAD_ID, -100)]  # drop the decoder start token
            pred = pred[: pred.index(EOS_ID) + 1] if EOS_ID in pred else pred
            hits += pred == label
        return {"exact_match": hits / len(labels)}

    args = Seq2SeqTrainingArguments(
        output_dir=str(output_dir), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=64, learning_rate=learning_rate, warmup_steps=30, lr_scheduler_type="linear",
        predict_with_generate=True, generation_max_length=max_len + 3, eval_strategy="no", save_strategy="no",
        report_to=[], use_cpu=True, seed=seed, disable_tqdm=True, logging_strategy="no",
    )
    torch.manual_seed(seed)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=train, eval_dataset=held_out,
                             data_collator=PaddingCollator(PAD_ID), compute_metrics=exact_match)
    # Tiny models train several times faster on one thread than on cores shared with other processes
    # (measured: ~18 s instead of ~145 s for 940 steps of a 2+2-layer d_model=64 Transformer).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer.train()
        return trainer.evaluate()["eval_exact_match"]
    finally:
        torch.set_num_threads(threads)


def generate_in_one_and_in_two_calls(model, ids, mask, prompt, prompt_mask, new_tokens=4,
                                     mask_covers_start=True):
    """transformers' GenerationTesterMixin.test_generate_continue_from_past_key_values, in this suite's words:
    greedy generation of ``new_tokens`` tokens after a decoder prompt (B, P) in one generate() call, and the
    same in two calls, the second fed the first's cache, its sequences and the decoder mask extended over them
    with ones. Returns the one call's output and the two calls' outputs.

    generate() prepends the start token to a prompt that does not begin with it, and a 1 to its mask; the
    first call's sequences begin with that token, so the continued call's mask gets its 1 too. transformers'
    generic test leaves it out (``mask_covers_start=False``): its mask is then shifted one place against the
    tokens (see docs/concepts.md). transformers cuts the continued call's tokens to those not in the cache
    only when the mask is as long as they are."""
    kwargs = dict(input_ids=ids, attention_mask=mask, do_sample=False, eos_token_id=-1, use_cache=True,
                  return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        one_call = model.generate(**kwargs, decoder_input_ids=prompt, decoder_attention_mask=prompt_mask,
                                  max_new_tokens=new_tokens)
        first = model.generate(**kwargs, decoder_input_ids=prompt, decoder_attention_mask=prompt_mask,
                               max_new_tokens=new_tokens - 1)
        sequences = first.sequences  # (B, 1 + P + new_tokens - 1): the start token, the prompt, new tokens
        continued_mask = prompt_mask
        if mask_covers_start:
            continued_mask = torch.cat([torch.ones_like(prompt_mask[:, :1]), prompt_mask], dim=1)
        continued_mask = F.pad(continued_mask, (0, sequences.shape[1] - continued_mask.shape[1]), value=1)
        second = model.generate(**kwargs, decoder_input_ids=sequences, decoder_attention_mask=continued_mask,
                                max_new_tokens=1, **{CACHE_NAME: output_cache(first)})
    return one_call, first, second


def cache_tensors(cache) -> list[torch.Tensor]:
    """Every tensor a decoder cache holds: each layer's keys and values of both halves of an
    EncoderDecoderCache (self-attention first), or the RNN state's tensors."""
    if isinstance(cache, EncoderDecoderCache):
        halves = (cache.self_attention_cache, cache.cross_attention_cache)
        return [tensor for half in halves for layer in half.layers for tensor in (layer.keys, layer.values)]
    return [tensor for tensor in cache.tensors() if tensor is not None]


def labelled_batch():
    """Right-padded sources (pad 0, end 2) and labels with -100 after each row's end (and one -100 inside a row):
    token ids below 17, for tiny models of any vocabulary above that."""
    input_ids = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [11, 2, 0, 0, 0]])
    labels = torch.tensor([[12, 13, 14, 2], [15, -100, 2, -100], [16, 2, -100, -100]])
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long(), "labels": labels}


def decoder_inputs(model, batch):
    """The forward's inputs for ``batch`` with the decoder inputs made from its labels, as the model shifts them."""
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
            "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(batch["labels"])}


def converted_config_values(toolkit: str, checkpoint: Path, keys, out: Path) -> dict:
    """The values of ``keys`` in the config.json that ``hf-s2s convert --from toolkit`` writes for ``checkpoint``
    (skips the test where the fixture is absent)."""
    import pytest

    from hf_s2s.importers import convert

    if not checkpoint.is_file():
        pytest.skip(f"no fixture {checkpoint.parent.name}")
    config = json.loads((convert(toolkit, checkpoint, out) / "config.json").read_text())
    return {key: config[key] for key in keys}
