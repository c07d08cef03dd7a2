#!/usr/bin/env python
"""How many bytes the server's answer to the attention explorer's request takes: a Transformer of the reference size
(the ``transformer_multi30k`` recipe's config: 3+3 layers, d_model 256, 8 heads, with random weights) and a BPE
tokenizer of the recipe's 8,000 tokens trained on Multi30k's training text, asked for the longest test sentences of
test_2016_flickr in one request, as the page asks for them: every layer's and head's weights (``output_attentions``,
what the page asked for up to 0.2) and the one map the page shows (``attention``).

    python scripts/explorer_answer_size.py                        # the 40 longest test sentences
    python scripts/explorer_answer_size.py --sentences 10 --folder runs/answer_size_model

A random model rarely ends a sentence: each translation runs to its length bound (1.3 x source tokens + 5), longer
than a trained model's, so these are the sizes of long answers.
"""

import argparse
import json
import sys
from pathlib import Path

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from checkout import use_shared_corpus  # noqa: E402
from transformers import AutoModelForSeq2SeqLM  # noqa: E402

from hf_s2s.benchmark.measure import multi30k_dir  # noqa: E402
from hf_s2s.data.tokenization import train_tokenizer_from_texts  # noqa: E402
from hf_s2s.inference.engines import load_engine  # noqa: E402
from hf_s2s.inference.translate import read_sentences  # noqa: E402
from hf_s2s.serving.app import create_app  # noqa: E402
from hf_s2s.serving.config import RequestLimits  # noqa: E402
from hf_s2s.serving.server import serve_in_thread  # noqa: E402
from hf_s2s.training.arguments import build_config, parse_args  # noqa: E402

RECIPE = "transformer_multi30k"


def reference_folder(folder: Path, seed: int) -> Path:
    """The recipe's Transformer with random weights and a tokenizer trained on Multi30k, saved into ``folder`` (reused
    when it holds one already)."""
    if (folder / "config.json").is_file():
        return folder
    job = parse_args(["--recipe", RECIPE, "--output_dir", str(folder)])
    data = multi30k_dir()
    texts = read_sentences(data / "train.de.gz") + read_sentences(data / "train.en.gz")
    tokenizer = train_tokenizer_from_texts(texts, vocab_size=job.model.vocab_size)
    torch.manual_seed(seed)
    model = AutoModelForSeq2SeqLM.from_config(build_config(job.model, tokenizer))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--sentences", type=int, default=40, help="the longest test sentences sent in one request")
    parser.add_argument("--folder", type=Path, default=ROOT / "runs" / "explorer_answer_size",
                        help="where the random model folder is written (reused if it exists)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    use_shared_corpus([])
    folder = reference_folder(args.folder, args.seed)
    engine = load_engine(folder, threads=1)
    test = read_sentences(multi30k_dir() / "test_2016_flickr.de.gz")
    lengths = [len(ids) for ids in engine.tokenizer(test)["input_ids"]]
    longest = sorted(range(len(test)), key=lambda i: (-lengths[i], i))[: args.sentences]
    sentences = [test[i] for i in longest]
    print(f"{folder}: {engine.model.num_parameters():,} parameters; {len(sentences)} sentences of "
          f"{min(lengths[i] for i in longest)}-{max(lengths[i] for i in longest)} source tokens (</s> included)")
    requests = {
        "every layer and head (output_attentions)": {"output_attentions": True},
        "the page's view (attention)": {"attention": {}},
    }
    limits = RequestLimits(max_request_bytes=10_000_000)
    with serve_in_thread(create_app({"model": engine}, limits=limits)) as url:
        for name, options in requests.items():
            answer = httpx.post(f"{url}/translate", json={"sentences": sentences, "scores": True, **options},
                                timeout=3600)
            if answer.status_code != 200:
                print(f"{name}: refused ({answer.status_code}): {json.dumps(answer.json())[:300]}")
                continue
            print(f"{name}: {len(answer.content):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
