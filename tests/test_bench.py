"""Benchmark tests: the --quick smoke run of `hf-s2s bench`, the FLOP counter, and the textbook reference RNN."""

import json
from pathlib import Path

import pytest
import torch

from hf_s2s.benchmark import TextbookRNNSeq2Seq, count_matmul_flops, make_batches
from hf_s2s.benchmark.serving import _profile_table
from hf_s2s.benchmark.serving_profile import BENCHMARK, ENGINE_THREADS, ServingProfiler
from hf_s2s.benchmark.suites import BenchSettings, build_hf_s2s_rnn, build_textbook_rnn
from hf_s2s.cli.bench import main as bench_command

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_run_writes_json_and_markdown(tmp_path):
    report = bench_command(["--quick", "--output", str(tmp_path)])
    saved = json.loads((tmp_path / "bench.json").read_text())
    markdown = (tmp_path / "bench.md").read_text()
    assert saved["environment"]["threads"] == 1 == report["environment"]["threads"]
    models = saved["training"]["models"]
    assert set(models) == {"hf_s2s (post-LN)", "hf_s2s (pre-LN)", "MarianMT"}
    assert all(m["tokens_per_s"] > 0 and len(m["times"]) == 2 for m in models.values())
    assert set(saved["generation"]) == {"greedy", "beam 2"}
    greedy, beam = saved["generation"]["greedy"], saved["generation"]["beam 2"]
    ct2_rows = {"CTranslate2 float32 (hf_s2s Transformer exported)", "CTranslate2 int8 (hf_s2s Transformer exported)"}
    assert {"hf_s2s Transformer compiled", "hf_s2s RNN Bahdanau GRU compiled", "MarianMT bf16",
            "hf_s2s Transformer int8", "hf_s2s RNN Bahdanau GRU int8"} | ct2_rows <= set(greedy)
    assert "hf_s2s Transformer compiled" not in beam and ct2_rows <= set(beam)  # transformers compiles no beam search
    assert all(row["tokens_per_s"] > 0 for row in [*greedy.values(), *beam.values()])
    assert "Transformer greedy >= 0.8x CTranslate2 float32" in saved["summary"]["targets"]
    assert set(saved["cache"]["hf_s2s Transformer"]) == {"cached", "uncached"}
    assert saved["rnn"]["Bahdanau GRU"]["training_ratio"] > 0
    learning = saved["learning"]["Luong LSTM"]["validation_loss"]
    assert set(learning) == {"hf_s2s", "hf_s2s, init_std 0.1", "textbook"}
    assert all(0 < loss < 20 for loss in learning.values()) and learning["hf_s2s"] != learning["hf_s2s, init_std 0.1"]
    assert 0 < saved["summary"]["flop_utilisation"]["MarianMT"] < 1.5
    grouped, budget = saved["batching"]["length-grouped, 8 sentences"], saved["batching"]["token budget 140"]
    assert budget["padding_fraction"] < grouped["padding_fraction"] < 1
    assert all(r["tokens_per_s"] > 0 and len(r["times"]) == 2 for r in (grouped, budget))
    pipeline = saved["pipeline"]
    assert set(pipeline["models"]) == {"hf_s2s (main job)", "hf_s2s (main job), R-Drop 5", "MarianMT"}
    assert pipeline["tokens_per_run"] > 0 and saved["summary"]["pipeline_rdrop_speed_ratio"] > 0
    assert all(m["tokens_per_s"] > 0 and len(m["times"]) == 2 for m in pipeline["models"].values())
    serving = saved["serving"]
    assert {"Transformer | torch float32 | sequential", "Transformer | ctranslate2 int8 | dynamic batching",
            "RNN Bahdanau GRU | torch int8 | dynamic batching"} <= set(serving["rows"])
    assert all(row["answered_once"] and row["sentences_per_s"] > 0 for row in serving["rows"].values())
    assert all(serving["same_translations_batched_and_sequential"].values())
    # issue 48: trained models that end sentences, the engines alone on the server's batches, the clients' CPU apart,
    # the ONNX engine and the shortlist served, and a profile of the served path
    assert set(serving["trained_models"]) == {"Transformer", "RNN Bahdanau GRU"}
    assert {"Transformer | onnx float32 | dynamic batching",
            "Transformer | torch float32 + shortlist | dynamic batching"} <= set(serving["rows"])
    alone = {name for name, row in serving["rows"].items() if "served_vs_alone" in row}
    assert alone == {name for name in serving["rows"] if " float32" in name and name.endswith("| dynamic batching")}
    assert all(serving["rows"][name]["served_vs_alone"] > 0 for name in alone)
    assert all(row["client_cpu_s"] > 0 and row["server_cpu_s"] > 0 for row in serving["rows"].values())
    assert set(serving["profiles"]) == alone
    assert all(profile["cpu_seconds"]["decoding"] + profile["cpu_seconds"]["engine threads"] > 0
               for profile in serving["profiles"].values())
    assert "Where a served sentence's time goes" in markdown
    for heading in ("Transformer training", "Generation", "Shortlist", "Cache scaling", "textbook", "RNN learning", "Batching",
                    "Training job pipeline", "Serving", "Targets"):
        assert heading in markdown
    assert ragged_tables(markdown) == []


def ragged_tables(markdown: str) -> list[str]:
    """The header lines of the markdown tables whose rows have another number of cells than their header."""
    ragged, table = [], []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line.count("|") - 1)
            if len(table) == 1:
                header = line
            elif table[-1] != table[0] and header not in ragged:
                ragged.append(header)
        else:
            table = []
    return ragged


def test_the_serving_profile_table_has_a_cell_per_column():
    """The profile's first column names the model and the engine in one cell (its header once had two)."""
    cpu = dict.fromkeys(("decoding", "tokenization", BENCHMARK), 0.5)
    serving = {"profiles": {"Transformer | torch float32 | dynamic batching": {"sentences": 10, "seconds": 2.0,
                                                                                "cpu_seconds": cpu}},
               "rows": {"Transformer | torch float32 | dynamic batching": {"alone_seconds": 1.0}},
               "sentences_per_run": 10}
    lines = _profile_table(serving)
    assert ragged_tables("\n".join(lines)) == []
    header, _, row = [line for line in lines if line.startswith("|")]
    assert header.startswith("| model, engine | decoding |") and row.startswith("| Transformer, torch float32 | 50.00 |")
    assert ragged_tables("| a | b |\n|---|---|\n| x |\n\n| c |\n|---|\n| y |") == ["| a | b |"]


def test_linear_flops_forward_and_backward():
    layer = torch.nn.Linear(32, 48)
    x = torch.randn(5, 7, 32, requires_grad=True)
    forward = count_matmul_flops(lambda: layer(x))
    assert forward == 2 * 5 * 7 * 32 * 48
    both = count_matmul_flops(lambda: layer(x).sum().backward())
    assert both == 3 * forward  # backward: grad of the input and of the weight, one product each


def test_cpu_attention_kernel_flops_are_counted():
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))  # (B, H, T, d_h)
    flops = count_matmul_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    assert flops == 2 * (2 * 2 * 4 * 6 * 6 * 8)  # Q K^T and weights V


@pytest.mark.parametrize("cell_type,attention_type", [("gru", "bahdanau"), ("lstm", "luong_general")])
def test_textbook_rnn_matches_hf_s2s_shapes_and_sizes(cell_type, attention_type):
    dims = BenchSettings.quick().dims
    textbook = build_textbook_rnn(dims, cell_type, attention_type)
    ours = build_hf_s2s_rnn(dims, cell_type, attention_type)
    batch = make_batches([(3, 4), (5, 2), (6, 6)], 1, 3, dims.vocab_size)[0]
    loss = textbook(batch["input_ids"], batch["attention_mask"], batch["labels"])
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    tokens = textbook.eval().greedy(batch["input_ids"], batch["attention_mask"], num_tokens=5)
    assert tokens.shape == (3, 5) and tokens.max() < dims.vocab_size
    ours_logits = ours.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).logits
    assert ours_logits.shape == (3, batch["labels"].shape[1], dims.vocab_size)
    # the same architecture at the same sizes: parameter counts agree within 2% (layouts of biases differ)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert abs(count(textbook) - count(ours)) / count(ours) < 0.02


def test_textbook_rnn_rejects_unsupported_attention():
    with pytest.raises(ValueError, match="attention_type"):
        TextbookRNNSeq2Seq(10, 4, 4, 4, 4, attention_type="luong_dot")


def test_batches_follow_the_length_pairs_and_pad():
    batch = make_batches([(3, 4)], 1, 2, 50, seed=0)[0]
    assert batch["input_ids"].shape == (2, 3) and batch["labels"].shape == (2, 4)
    assert batch["num_tokens"] == 2 * (3 + 4)
    assert (batch["input_ids"][:, -1] == 2).all() and (batch["labels"][:, -1] == 2).all()


def test_pipeline_section_runs_the_training_jobs_path(tmp_path):
    """The pipeline section's runs are the main job's: its recipe's arguments, its trainer, label smoothing 0.1 in
    the hf_s2s model (Trainer's smoother off, so the labels reach it) and in Trainer for MarianMT; R-Drop in the
    model of its own run only."""
    from hf_s2s.benchmark.pipeline import pipeline_dataset, pipeline_trainer
    from hf_s2s.training.arguments import load_recipe
    from hf_s2s.training.trainer import CountingSeq2SeqTrainer

    settings = BenchSettings.quick()
    tokenizer, train_dataset = pipeline_dataset(settings)
    ours = pipeline_trainer("hf_s2s (main job)", settings, tokenizer, train_dataset, str(tmp_path))
    marian = pipeline_trainer("MarianMT", settings, tokenizer, train_dataset, str(tmp_path))
    rdrop = pipeline_trainer("hf_s2s (main job), R-Drop 5", settings, tokenizer, train_dataset, str(tmp_path))
    assert isinstance(ours, CountingSeq2SeqTrainer) and isinstance(marian, CountingSeq2SeqTrainer)
    assert (ours.model.config.rdrop_alpha, rdrop.model.config.rdrop_alpha) == (0.0, 5.0)
    assert rdrop.model.config.dropout > 0 and rdrop.model.config.label_smoothing == 0.1
    assert ours.args.label_smoothing_factor == marian.args.label_smoothing_factor == 0.1
    assert ours.model.config.label_smoothing == 0.1 and ours.label_smoother is None
    assert marian.label_smoother is not None
    recipe = load_recipe("transformer_small")
    assert ours.args.learning_rate == recipe["learning_rate"] and ours.args.adam_beta2 == recipe["adam_beta2"]
    assert ours.args.train_sampling_strategy == "group_by_length" and ours.args.max_steps == settings.pipeline_steps


def test_pipeline_memory_probe_measures_the_training_peak_apart_from_setup():
    """The peak while training is measured after resetting the high-water mark (so corpus loading and tokenizer
    training do not count in it), and is never below the memory held before training."""
    from hf_s2s.benchmark.pipeline import _pipeline_memory_probe

    memory = _pipeline_memory_probe(BenchSettings.quick(), "hf_s2s (main job)")
    assert 0 < memory["rss_before_training_mb"] <= memory["peak_rss_training_mb"] <= memory["peak_rss_process_mb"]
    assert memory["peak_rss_growth_mb"] == memory["peak_rss_training_mb"] - memory["rss_before_training_mb"]


def test_the_default_sections_leave_serving_out_without_the_serve_extra_and_an_asked_one_is_refused(
        monkeypatch, tmp_path, capsys):
    from hf_s2s.cli import bench

    def missing(also=()):
        raise ImportError("hf-s2s serve needs the serve extra: pip install 'hf_s2s[serve]'")

    ran = []
    monkeypatch.setattr(bench, "require_serve_extra", missing)
    monkeypatch.setattr(bench, "run_benchmark", lambda settings, sections: ran.append(sections) or {})
    monkeypatch.setattr(bench, "to_markdown", lambda report: "")
    bench.main(["--quick", "--output", str(tmp_path)])
    assert ran == [tuple(s for s in bench.SECTIONS if s not in ("serving", "scaling"))]  # scaling: only when asked
    assert "note: skipping the serving section" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="error: the serving section: .*serve extra"):
        bench.main(["--quick", "--sections", "serving", "--output", str(tmp_path)])


def test_scaled_corpus_holds_each_training_pair_factor_times_aligned_and_links_the_rest(tmp_path):
    from collections import Counter

    from hf_s2s.benchmark.scaling import write_base_corpus, write_scaled_corpus
    from hf_s2s.data.corpus import load_text_folder

    base = write_base_corpus(tmp_path / "base", "src", "tgt", use_multi30k=False)
    scaled = write_scaled_corpus(base, 3, tmp_path / "x3", "src", "tgt", seed=0)
    pairs = lambda folder, split: [(p["src"], p["tgt"]) for p in  # noqa: E731
                                   load_text_folder(folder, "src", "tgt")[split]["translation"]]
    base_train, scaled_train = pairs(base, "train"), pairs(scaled, "train")
    assert Counter(scaled_train) == Counter({pair: 3 * n for pair, n in Counter(base_train).items()})
    copies = [scaled_train[k * len(base_train): (k + 1) * len(base_train)] for k in range(3)]
    assert len({tuple(copy) for copy in copies}) == 3  # each copy in its own order
    assert pairs(scaled, "validation") == pairs(base, "validation") and (scaled / "val.src.gz").is_symlink()


@pytest.mark.parametrize(("flags", "message"), [
    (["--scaling-factors", "1", "0"], r"error: --scaling-factors must be positive numbers of copies, got \[1, 0\]"),
    (["--scaling-dir", "{tmp}"], r"error: --scaling-dir .* exists; the scaling section writes a new folder"),
    (["--serving-max-wait-ms", "-5"], r"error: --serving-max-wait-ms must be a number of milliseconds >= 0, got -5"),
    (["--serving-max-wait-ms", "nan"], r"error: --serving-max-wait-ms must be a number of milliseconds >= 0, got nan"),
])
def test_the_scaling_section_refuses_bad_flags_before_it_writes_anything(tmp_path, flags, message):
    with pytest.raises(SystemExit, match=message):
        bench_command(["--quick", "--sections", "scaling", "--output", str(tmp_path / "out"),
                       *[flag.format(tmp=tmp_path) for flag in flags]])
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_scaling_section_runs_the_job_on_each_corpus_size_in_memory_and_streamed(tmp_path):
    report = bench_command(["--quick", "--sections", "scaling", "--output", str(tmp_path / "out"), "--scaling-dir",
                            str(tmp_path / "work")])
    runs = report["scaling"]["runs"]
    assert list(runs) == ["1x in memory", "1x streamed", "2x in memory", "2x streamed"]
    for run in runs.values():
        assert run["corpus"]["pairs"] == 128 * run["factor"] and run["steps"] == 3
        assert list(run["phases"]) == ["load", "tokenizer", "encode", "batches", "first step", "other steps"]
        assert run["steady_tokens_per_s"] > 0 and run["peak_rss_mb"] > 0
        assert run["first_step_seconds"] >= sum(run["phases"][name]["seconds"] for name in ("load", "tokenizer"))
    assert runs["2x in memory"]["pairs"] == 256
    assert not any((tmp_path / "work").glob("x*"))  # the corpora and runs it wrote are gone
    assert "**Scaling**" in (tmp_path / "out" / "bench.md").read_text()


def test_the_shortlist_section_times_the_shortlist_beside_marian_at_each_batch_size(tmp_path):
    """`--sections shortlist`: the Transformer with a shortlist built by build-shortlist's builder, beside itself
    without one and MarianMT, greedy and beam, per batch size; K (the output rows a batch multiplies) grows with the
    batch, as the batches are prefixes of the same test sentences."""
    report = bench_command(["--quick", "--sections", "shortlist", "--output", str(tmp_path)])
    saved = json.loads((tmp_path / "bench.json").read_text())
    settings = BenchSettings.quick()
    batches = saved["shortlist"]["batches"]
    assert list(batches) == [str(batch) for batch in settings.shortlist_batches]
    for result in batches.values():
        assert set(result["searches"]) == {"greedy", f"beam {settings.shortlist_num_beams}"}
        for models in result["searches"].values():
            assert set(models) == {"MarianMT", "hf_s2s Transformer (post-LN)", "hf_s2s Transformer + shortlist"}
            assert all(row["tokens_per_s"] > 0 and len(row["times"]) == settings.repeats for row in models.values())
        assert 0 < result["list_tokens"] <= result["union_tokens"] < saved["shortlist"]["vocab_size"]
    assert batches["1"]["union_tokens"] <= batches["4"]["union_tokens"]
    assert "Transformer + shortlist greedy, batch 1 >= 1.5x Marian" in report["summary"]["targets"]
    assert "**Shortlist**" in (tmp_path / "bench.md").read_text()


def test_the_serving_profile_charges_native_threads_their_own_cpu_time():
    """Threads without a Python stack (an engine's pool; here torch's second intra-op thread) are charged the CPU time
    each used since the block began, read per thread: the ONNX engine's profile once read -0.16 s of engine threads,
    the process' total of native threads at the end, some of them ended, less the total at the start."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        matrix = torch.randn(600, 600)
        with ServingProfiler() as profile:
            for _ in range(20):
                matrix @ matrix
    finally:
        torch.set_num_threads(threads)
    assert profile.seconds()[ENGINE_THREADS] > 0
