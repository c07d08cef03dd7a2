"""The generation section: generated tokens/s at a fixed output length, greedy and beam, every row timed side by
side in one process on the same source batch.

Rows: the hf_s2s Transformer (eager float32, compiled, bfloat16, int8), MarianMT of the same dimensions (float32,
bfloat16), CTranslate2 running the same hf_s2s Transformer exported with :func:`hf_s2s.inference.ctranslate2`
(float32, int8; when ctranslate2 is installed), and the RNN family (eager, compiled, int8). Each row's speed is
also given as a ratio to MarianMT float32 and to CTranslate2 float32.

Every row decodes exactly ``new_tokens`` tokens per sentence (minimum = maximum), so rows differ in speed only. A
row that cannot run a search is left out of that search's table: transformers compiles greedy and sampling
decoding only (beam search runs eagerly even when asked to compile).
"""

import copy
from collections.abc import Callable

import torch
from transformers import CompileConfig, GenerationConfig

from ..inference.ctranslate2 import exported_translator, import_ctranslate2, translate_ids
from ..models.shortlist import VocabularyShortlist
from .builders import EOS, PAD, START
from .measure import interleaved_times, median


def generation_config(new_tokens: int, num_beams: int, **overrides) -> GenerationConfig:
    """Exactly ``new_tokens`` tokens per sentence (min = max), deterministic search, identical settings for all."""
    return GenerationConfig(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=num_beams, do_sample=False,
        pad_token_id=PAD, bos_token_id=START, eos_token_id=EOS, decoder_start_token_id=START,
        length_penalty=1.0, early_stopping=False, **overrides,
    )


def compile_config_on_every_device() -> CompileConfig:
    """A compile config for the whole decoding step (fullgraph, static shapes). transformers compiles on accelerators
    only; ``_compile_all_devices`` asks for the same on the CPU."""
    compile_config = CompileConfig(fullgraph=True, dynamic=False, mode="default")
    compile_config._compile_all_devices = True
    return compile_config


def compiled_generation_config(new_tokens: int) -> GenerationConfig:
    """Greedy decoding that transformers compiles: a static (fixed-size) cache and :func:`compile_config_on_every_device`."""
    return generation_config(new_tokens, 1, cache_implementation="static",
                             compile_config=compile_config_on_every_device())


def generate_fn(model, inputs: dict, config: GenerationConfig, **generate_kwargs) -> Callable[[], None]:
    """One timed call: ``model.generate`` on ``inputs`` (and ``generate_kwargs``, e.g. ``shortlist=``), checked to
    produce exactly the configured length."""
    new_tokens = config.max_new_tokens

    def run() -> None:
        out = model.generate(**inputs, generation_config=config, **generate_kwargs)
        if out.shape[1] != new_tokens + 1:  # start token + new tokens
            raise RuntimeError(f"{type(model).__name__} generated {out.shape[1] - 1} tokens, expected {new_tokens}")

    return run


def _ctranslate2_fns(model, inputs: dict, new_tokens: int, num_beams: int) -> dict[str, Callable]:
    """CTranslate2 float32 and int8 rows: the hf_s2s Transformer exported (no tokenizer: driven with token ids), on
    as many threads as torch uses here. None when ctranslate2 is not installed."""
    try:
        import_ctranslate2()
    except ImportError:
        return {}

    fns = {}
    for quantization, label in ((None, "float32"), ("int8", "int8")):
        translator = exported_translator(model, quantization=quantization, intra_threads=torch.get_num_threads())

        def run(translator=translator) -> None:
            ids = translate_ids(translator, inputs["input_ids"], inputs["attention_mask"], num_beams=num_beams,
                                max_new_tokens=new_tokens, min_new_tokens=new_tokens)
            if any(len(row) != new_tokens for row in ids):
                raise RuntimeError(f"CTranslate2 generated {[len(r) for r in ids]} tokens, expected {new_tokens}")

        fns[f"CTranslate2 {label} (hf_s2s Transformer exported)"] = run
    return fns


def bench_generation_rows(models: dict, rnn_models: dict, inputs: dict, new_tokens: int, num_beams: int,
                          repeats: int, warmup: int, int8: Callable | None = None) -> dict:
    """Times every row, greedy and beam; returns {search: {row: {"tokens_per_s", "times"}}}.

    models: {"hf_s2s Transformer (post-LN)": m, "MarianMT": m}; rnn_models: {"hf_s2s RNN <name>": m}; all float32,
    eval mode. ``int8``: the function that quantizes a model for int8 CPU inference (None: no int8 rows)."""
    transformer, marian = models["hf_s2s Transformer (post-LN)"], models["MarianMT"]
    eager = {**models, **rnn_models}
    bf16 = {"hf_s2s Transformer bf16": copy.deepcopy(transformer).to(torch.bfloat16),
            "MarianMT bf16": copy.deepcopy(marian).to(torch.bfloat16)}
    first_rnn_name, first_rnn = next(iter(rnn_models.items()))
    compiled = {"hf_s2s Transformer compiled": copy.deepcopy(transformer),
                f"{first_rnn_name} compiled": copy.deepcopy(first_rnn)}
    quantized = {} if int8 is None else {"hf_s2s Transformer int8": int8(transformer),
                                         f"{first_rnn_name} int8": int8(first_rnn)}
    batch = inputs["input_ids"].shape[0]
    results = {}
    for search, beams in (("greedy", 1), (f"beam {num_beams}", num_beams)):
        config = generation_config(new_tokens, beams)
        fns = {name: generate_fn(m, inputs, config) for name, m in {**eager, **bf16, **quantized}.items()}
        if beams == 1:  # transformers compiles greedy and sampling only
            fns.update({name: generate_fn(m, inputs, compiled_generation_config(new_tokens))
                        for name, m in compiled.items()})
        fns.update(_ctranslate2_fns(transformer, inputs, new_tokens, beams))
        times = interleaved_times(fns, repeats, warmup)
        results[search] = {name: {"tokens_per_s": batch * new_tokens / median(t), "times": t}
                           for name, t in times.items()}
    return results


SHORTLIST_ROW = "hf_s2s Transformer + shortlist"


def bench_shortlist_rows(transformer, marian, shortlist: VocabularyShortlist, inputs_by_batch: dict[int, dict],
                         new_tokens: int, num_beams: int, repeats: int, warmup: int) -> dict:
    """The hf_s2s Transformer with and without ``shortlist`` next to MarianMT (all float32, the same dimensions and
    vocabulary), greedy and beam, at each batch size of ``inputs_by_batch`` (real source sentences: the shortlist
    depends on their tokens). Returns {batch: {"list_tokens": the mean of each sentence's own list,
    "union_tokens": K, the output rows the batch multiplies, "searches": {search: {row: {"tokens_per_s",
    "times"}}}}}."""
    results = {}
    for batch, inputs in inputs_by_batch.items():
        allowed = shortlist.allowed(inputs["input_ids"], inputs["attention_mask"], include=(PAD, START, EOS))
        searches = {}
        for search, beams in (("greedy", 1), (f"beam {num_beams}", num_beams)):
            config = generation_config(new_tokens, beams)
            fns = {"MarianMT": generate_fn(marian, inputs, config),
                   "hf_s2s Transformer (post-LN)": generate_fn(transformer, inputs, config),
                   SHORTLIST_ROW: generate_fn(transformer, inputs, config, shortlist=shortlist)}
            times = interleaved_times(fns, repeats, warmup)
            searches[search] = {name: {"tokens_per_s": batch * new_tokens / median(t), "times": t}
                                for name, t in times.items()}
        results[batch] = {"list_tokens": allowed.sum(1).float().mean().item(),
                          "union_tokens": int(allowed.any(0).sum()), "searches": searches}
    return results
