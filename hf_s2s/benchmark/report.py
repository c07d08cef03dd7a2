"""The benchmark's markdown tables, built from the JSON report of ``run_benchmark``."""

from .scaling import scaling_table
from .serving import serving_table


def _fmt(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _generation_table(report: dict) -> list[str]:
    """One row per decoder; per search its tokens/s and ratios to MarianMT and (when measured) CTranslate2 float32.
    A decoder that did not run a search (compiled rows under beam search) shows "-"."""
    generation = report["generation"]
    searches = list(generation)
    names = list(dict.fromkeys(name for models in generation.values() for name in models))
    peers = [("MarianMT", "vs Marian")] + [(name, "vs CT2 float32") for name in names
                                            if name.startswith("CTranslate2 float32")]
    rows = []
    for name in names:
        row = [name]
        for search in searches:
            models = generation[search]
            speed = models.get(name, {}).get("tokens_per_s")
            row.append(_fmt(speed) if speed else "-")
            row += [f"{speed / models[peer]['tokens_per_s']:.2f}x" if speed and peer in models else "-"
                    for peer, _ in peers]
        rows.append(row)
    settings = report["settings"]
    header = ["decoder"] + [h for s in searches for h in (f"{s} tok/s", *(label for _, label in peers))]
    return [f"**Generation** (batch {settings['generation_batch']}, exactly {settings['new_tokens']} new tokens per "
            "sentence; generated tokens/s; float32 unless named; compiled: generate() with a static cache and "
            "torch.compile, greedy only as transformers compiles no beam search)", ""] + _table(header, rows) + [""]


def _shortlist_table(report: dict) -> list[str]:
    """One row per batch size: K, then per search the shortlist row's tokens/s and its ratios to MarianMT and to the
    same Transformer without the shortlist."""
    shortlist, settings = report["shortlist"], report["settings"]
    rows, searches = [], []
    for batch, result in shortlist["batches"].items():
        searches = list(result["searches"])
        row = [str(batch), _fmt(result["list_tokens"]), _fmt(result["union_tokens"])]
        for models in result["searches"].values():
            ours = models["hf_s2s Transformer + shortlist"]["tokens_per_s"]
            row += [_fmt(ours), f"{ours / models['MarianMT']['tokens_per_s']:.2f}x",
                    f"{ours / models['hf_s2s Transformer (post-LN)']['tokens_per_s']:.2f}x",
                    f"{models['hf_s2s Transformer (post-LN)']['tokens_per_s'] / models['MarianMT']['tokens_per_s']:.2f}x"]
        rows.append(row)
    header = ["batch", "tokens per sentence's list", "K (the batch's union)"] + [
        h for s in searches for h in (f"{s} tok/s", "vs Marian", "vs no shortlist", "no shortlist vs Marian")]
    return [f"**Shortlist** ({shortlist['shortlist']}; vocabulary {shortlist['vocab_size']:,}; the first test "
            f"sentences; exactly {settings['new_tokens']} new tokens per sentence; float32)", ""] + _table(header, rows) + [""]


def to_markdown(report: dict) -> str:
    env, summary = report["environment"], report["summary"]
    lines = [f"torch {env['torch']}, {env['threads']} torch thread(s), CPU {env['cpu_capability']}; lengths: "
             f"{report['length_distribution']['source']} (mean {report['length_distribution']['mean_source']:.1f} + "
             f"{report['length_distribution']['mean_target']:.1f} tokens). Medians of "
             f"{report['settings']['repeats']} repeats, all rows of a table timed side by side.", ""]
    if "training" in report:
        t = report["training"]
        memory = report.get("memory") or {}
        peak = report.get("matmul_peak")
        marian = t["models"]["MarianMT"]["tokens_per_s"]
        rows = []
        for name, m in t["models"].items():
            row = [name, _fmt(m["tokens_per_s"]), f"{m['tokens_per_s'] / marian:.2f}x",
                   _fmt(memory[name]["peak_rss_growth_mb"]) if name in memory else "-",
                   _fmt(m["flops_per_s"] / 1e9, 1)]
            row.append(f"{100 * m['flops_per_s'] / peak['flops_per_s']:.0f}%" if peak else "-")
            rows.append(row)
        lines += ["**Transformer training** (forward + backward + AdamW, random padded batches of "
                  f"{report['settings']['dims']['batch_size']} sentences; tokens = real source + target tokens)", ""]
        lines += _table(["model", "tokens/s", "vs Marian", "peak memory growth (MB)", "matmul GFLOP/s",
                         "of matmul peak"], rows)
        if peak:
            lines += ["", f"Matmul peak: {peak['flops_per_s'] / 1e9:.1f} GFLOP/s ({peak['size']}x{peak['size']} "
                          "float32 mm)."]
        lines.append("")
    if "generation" in report:
        lines += _generation_table(report)
    if "shortlist" in report:
        lines += _shortlist_table(report)
    if "cache" in report:
        lengths = report["settings"]["cache_lengths"]
        rows = []
        for name, modes in report["cache"].items():
            for mode, per_length in modes.items():
                per_length = {int(k): v for k, v in per_length.items()}  # JSON keys are strings
                values = [per_length.get(k) for k in lengths]
                measured = [v for v in values if v is not None]
                rows.append([name, mode] + [f"{1000 * v:.2f}" if v is not None else "-" for v in values]
                            + [f"{measured[-1] / measured[0]:.2f}x ({max(per_length)} vs {lengths[0]})"])
        lines += [f"**Cache scaling** (greedy, batch {report['settings']['cache_batch']}; ms per generated token; "
                  f"uncached only up to {report['settings']['uncached_max_length']} tokens)", ""]
        lines += _table(["model", "cache"] + [str(k) for k in lengths] + ["longest vs shortest"], rows)
        lines.append("")
    if "rnn" in report:
        rows = []
        for name, r in report["rnn"].items():
            rows.append([name, _fmt(r["training_tokens_per_s"]["hf_s2s"]), _fmt(r["training_tokens_per_s"]["textbook"]),
                         f"{r['training_ratio']:.2f}x", _fmt(r["greedy_tokens_per_s"]["hf_s2s"]),
                         _fmt(r["greedy_tokens_per_s"]["textbook"]), f"{r['greedy_ratio']:.2f}x"])
        lines += ["**RNN family vs the textbook loop** (training tokens/s; greedy generated tokens/s)", ""]
        lines += _table(["model", "train hf_s2s", "train textbook", "ratio", "greedy hf_s2s", "greedy textbook",
                         "ratio"], rows)
        lines.append("")
    if "learning" in report:
        steps, batch = report["settings"]["learning_steps"], report["settings"]["dims"]["batch_size"]
        rows = [[name, *(f"{r['validation_loss'][k]:.3f}" for k in ("hf_s2s", "hf_s2s, init_std 0.1", "textbook")),
                 f"{r['loss_ratio']:.3f}"] for name, r in report["learning"].items()]
        lines += [f"**RNN learning** (validation loss per target token after {steps} Adam steps of {batch} real "
                  "sentence pairs, same batches and seed)", ""]
        lines += _table(["model", "hf_s2s", "hf_s2s, init_std 0.1 (old default)", "textbook", "hf_s2s / textbook"],
                        rows)
        lines.append("")
    if "batching" in report:
        rows = [[name, _fmt(r["batches_per_epoch"]), f"{r['sentences_per_batch']:.1f}",
                 f"{100 * r['padding_fraction']:.1f}%", _fmt(r["tokens_per_s"])] for name, r in report["batching"].items()]
        lines += [f"**Batching** (one epoch of the length distribution; padding = share of padded source + target "
                  f"positions; hf_s2s Transformer training tokens/s on {report['settings']['batching_batches']} "
                  "batches drawn from the epoch)", ""]
        lines += _table(["batches", "per epoch", "sentences per batch", "padding", "tokens/s"], rows)
        lines.append("")
    if "pipeline" in report:
        p = report["pipeline"]
        marian = p["models"]["MarianMT"]["tokens_per_s"]
        rows = [[name, _fmt(m["tokens_per_s"]), f"{m['tokens_per_s'] / marian:.2f}x",
                 *(_fmt(m[k]) if k in m else "-" for k in ("peak_rss_training_mb", "peak_rss_growth_mb",
                                                           "peak_rss_process_mb"))]
                for name, m in p["models"].items()]
        lines += [f"**Training job pipeline** (recipe `{p['recipe']}` through the job's trainer and collator, label "
                  f"smoothing on; {p['steps']} steps on {p['pairs']:,} pairs per run; real source + target tokens/s; "
                  "resident memory in a fresh process per model: the peak while training, its growth over the memory "
                  "before training, and the peak of the whole process, corpus and tokenizer training included)", ""]
        lines += _table(["model", "tokens/s", "vs Marian", "peak RSS training (MB)", "growth (MB)",
                         "peak RSS process (MB)"], rows)
        if "pipeline_rdrop_speed_ratio" in summary:
            ratio = summary["pipeline_rdrop_speed_ratio"]
            lines += ["", f"R-Drop (`--rdrop_alpha 5`, each batch run twice) trains at {ratio:.2f}x the main job's "
                          "tokens/s, on the same batches."]
        lines.append("")
    if "serving" in report:
        lines += serving_table(report)
    if "scaling" in report:
        lines += scaling_table(report)
    lines += ["**Targets**", ""]
    lines += _table(["target", "met"], [[k, "yes" if v else "no"] for k, v in summary["targets"].items()])
    return "\n".join(lines) + "\n"
