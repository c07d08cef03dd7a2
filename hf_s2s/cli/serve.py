"""Serve trained model folders over HTTP, with dynamic batching (needs the serve extra: pip install 'hf_s2s[serve]').

    hf-s2s serve runs/transformer_small/model                   # one model, named "model", on 127.0.0.1:8000
    hf-s2s serve de-en=runs/x/model de-fr=runs/y/model --port 9000  # two models; the first is the default
    hf-s2s serve runs/transformer_small/model --engine ctranslate2 --int8
    hf-s2s serve runs/rnn_small/model --engine onnx
    hf-s2s serve runs/transformer_small/model --engine auto  # the fastest engine that decodes it as generate()
    curl -s localhost:8000/translate -H 'content-type: application/json' \\
        -d '{"sentences": ["Ein Hund rennt."], "num_beams": 5, "scores": true}'

POST /translate takes {"sentences": [...]} and the options num_beams, num_return_sequences, scores, alignment,
max_len_a, max_len_b, no_length_bound, glossary ([source, target] pairs), shortlist (the folder's) and model; GET
/health, GET /models and GET /metrics (Prometheus) report, and /docs shows the API. Requests arriving together are decoded in shared batches of sentences of similar length, each
request's translations the same as alone. SIGTERM (or Ctrl-C) stops taking requests, translates those waiting for
--graceful-timeout seconds and answers the rest 503 before exiting. docs/serving.md has the details and the
measurements.
"""

import argparse
import sys
from pathlib import Path

import hf_s2s  # noqa: F401  (registers the model families)
from hf_s2s.cli import HelpFormatter
from hf_s2s.inference.engine_choice import AUTO, open_fastest_engine
from hf_s2s.inference.engines import ENGINES, TORCH_DTYPES, open_engine
from hf_s2s.serving import require_serve_extra
from hf_s2s.serving.config import DEFAULT_GRACEFUL_TIMEOUT, BatchingConfig, RequestLimits
from hf_s2s.serving.folders import check_model_folder


def parse_models(specs: list[str]) -> dict[str, str]:
    """``NAME=FOLDER`` or ``FOLDER`` (named after its last path component) -> {name: folder}, in order. A spec that
    is an existing path is a folder even if it holds '='. Two models of one name are refused."""
    models: dict[str, str] = {}
    for spec in specs:
        if "=" in spec and not Path(spec).exists():
            name, folder = spec.split("=", 1)
        else:
            name, folder = Path(spec).resolve().name, spec
        if not name or not folder:
            raise ValueError(f"{spec!r}: give a model as FOLDER or NAME=FOLDER")
        if name in models:
            raise ValueError(f"two models are named {name!r} ({models[name]} and {folder}); name them apart with "
                             "NAME=FOLDER")
        models[name] = folder
    return models


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("models", nargs="+", metavar="[NAME=]FOLDER",
                        help="a saved model folder (model + tokenizer), optionally named; default name: the folder's "
                             "last component. The first is the default model of requests that name none")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (0: a free one, printed)")
    parser.add_argument("--engine", choices=[*ENGINES, AUTO], default="torch",
                        help="torch: generate(), either family; ctranslate2: the Transformer family exported to "
                             "CTranslate2 on start (needs pip install 'hf_s2s[ctranslate2]'); onnx: either family "
                             "exported to ONNX on start, or a folder hf-s2s export-onnx wrote (needs pip install "
                             "'hf_s2s[onnx]'); auto: per model, the fastest of them that decodes its generation "
                             "config exactly as generate() does (named in the log and GET /models; requests it would "
                             "decode otherwise are refused, naming --engine torch)")
    parser.add_argument("--dtype", choices=list(TORCH_DTYPES), default="float32",
                        help="weight type of the torch engine (bfloat16 translations can depend on the batch)")
    parser.add_argument("--int8", action="store_true",
                        help="int8 weights: torch's dynamic quantization (translations can then depend on the batch), "
                             "or CTranslate2's int8")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads per batch (torch's intra-op threads, CTranslate2's intra_threads, "
                             "onnxruntime's intra-op threads); default: the engine's")
    batching = parser.add_argument_group("dynamic batching")
    batching.add_argument("--max-wait-ms", type=float, default=BatchingConfig.max_wait_ms,
                          help="how long a batch waits for requests to join it, from the later of its oldest request's "
                               "arrival and the end of the previous batch (ms)")
    batching.add_argument("--max-batch-tokens", type=int, default=BatchingConfig.max_batch_tokens,
                          help="source tokens per batch (padded: sentences x the longest)")
    batching.add_argument("--max-queue-sentences", type=int, default=BatchingConfig.max_queue_sentences,
                          help="sentences waiting per model; a request beyond it is answered 503 (retry later)")
    batching.add_argument("--no-batching", action="store_true",
                          help="decode each request alone, one after the other (for comparison)")
    limits = parser.add_argument_group("request limits (larger requests are refused with 413 or 422)")
    limits.add_argument("--max-sentences", type=int, default=RequestLimits.max_sentences,
                        help="sentences per request")
    limits.add_argument("--max-sentence-tokens", type=int, default=RequestLimits.max_sentence_tokens,
                        help="source tokens per sentence, </s> included (a model's own lower limit applies too)")
    limits.add_argument("--max-beams", type=int, default=RequestLimits.max_beams, help="num_beams per request")
    limits.add_argument("--max-request-bytes", type=int, default=RequestLimits.max_request_bytes,
                        help="size of a request body")
    limits.add_argument("--max-answer-bytes", type=int, default=RequestLimits.max_answer_bytes,
                        help="size of an answer's JSON, attention weights included, as predicted from the request's "
                             "options before decoding (413 beyond it, saying how to ask for less)")
    limits.add_argument("--max-request-memory", type=int, default=RequestLimits.max_request_memory, metavar="BYTES",
                        help="memory one request may take to decode and answer, as predicted from its options before "
                             "decoding (413 beyond it); no engine call and no batch's answers take more either")
    parser.add_argument("--show-folder-paths", action="store_true",
                        help="GET /models gives each model's absolute folder path; without it, a folder as given on "
                             "the command line (an absolute path: its last component only), so that no client learns "
                             "where the server keeps its files")
    parser.add_argument("--graceful-timeout", type=float, default=DEFAULT_GRACEFUL_TIMEOUT,
                        help="seconds the waiting requests get to be translated after SIGTERM or Ctrl-C; those left "
                             "are then answered 503")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn's log level")
    args = parser.parse_args(argv)
    try:  # options and the extra are checked before any model loads, and said in one line
        require_serve_extra()
        from hf_s2s.serving.app import create_app  # the serve extra, present (checked above)
        from hf_s2s.serving.server import serve

        if not 0 <= args.port <= 65535:
            raise ValueError(f"--port must be in [0, 65535], got {args.port}")
        if not args.graceful_timeout >= 0:
            raise ValueError(f"--graceful-timeout must be >= 0 seconds, got {args.graceful_timeout}")
        batching_config = BatchingConfig(max_wait_ms=args.max_wait_ms, max_batch_tokens=args.max_batch_tokens,
                                         max_queue_sentences=args.max_queue_sentences, batching=not args.no_batching)
        request_limits = RequestLimits(max_sentences=args.max_sentences, max_sentence_tokens=args.max_sentence_tokens,
                                       max_beams=args.max_beams, max_request_bytes=args.max_request_bytes,
                                       max_answer_bytes=args.max_answer_bytes,
                                       max_request_memory=args.max_request_memory)
        models = parse_models(args.models)
        for folder in models.values():
            check_model_folder(folder)
        engines = {name: open_fastest_engine(folder, dtype=args.dtype, int8=args.int8, threads=args.threads).engine
                   if args.engine == AUTO else
                   open_engine(folder, args.engine, dtype=args.dtype, int8=args.int8, threads=args.threads)
                   for name, folder in models.items()}
        # refuses defaults no request could decode
        app = create_app(engines, batching_config, request_limits, show_folder_paths=args.show_folder_paths)
        for engine in engines.values():
            engine.load()
        for name, engine in engines.items():
            chosen = f"; {engine.choice}" if engine.choice else ""
            print(f"serving {name!r}: {engine.folder} ({engine.model_type}, {engine.name} engine, {engine.weights})"
                  f"{chosen}", file=sys.stderr)
        serve(app, args.host, args.port, log_level=args.log_level, graceful_timeout=args.graceful_timeout)
    except (ImportError, OSError, ValueError) as error:
        sys.exit(f"error: {error}")
    return 0
