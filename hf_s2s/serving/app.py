"""The FastAPI application: ``POST /translate``, ``GET /health``, ``GET /models``, ``GET /metrics`` (Prometheus) and
the OpenAPI page at ``/docs``.

Every refusal is an answer with a JSON body ``{"error": "..."}`` and a 4xx status, decided before the request
reaches the queue, so that nothing a client sends can stop the batcher:

- 400: the body is not JSON;
- 404: an unknown model name (the answer names the served ones);
- 413: a body over ``max_request_bytes``, or more than ``max_sentences`` sentences;
- 422: a body that does not fit the schema (wrong types, unknown fields), no sentences, a sentence over the length
  limit, impossible options (``num_return_sequences`` above ``num_beams``, a bound of 0 tokens, an alignment from a
  model or engine that has none, more beams than ``max_beams``);
- 503: the model's queue is full (with ``Retry-After``), or the server is shutting down.

A failure while decoding is a 500 for the requests of that batch; the service goes on.
"""

import time
from collections.abc import Iterable
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..data.tokenization import target_side
from ..inference.engines import DecodingOptions, Engine
from ..models.version import __version__
from . import schemas
from .batching import Batcher, Closing, QueueFull, Translation
from .config import BatchingConfig, RequestLimits
from .metrics import CONTENT_TYPE, ServingMetrics

# Sentences named one by one in the refusal of sentences over the length limit; the count says how many more.
_SHOWN_SENTENCES = 5


class ServiceError(Exception):
    """A request refused with ``status`` and a one-sentence ``message``."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def _error(status: int, message: str, detail: list | None = None, headers: dict | None = None) -> JSONResponse:
    body = {"error": message} if detail is None else {"error": message, "detail": detail}
    return JSONResponse(body, status_code=status, headers=headers)


class _BodySizeLimit:
    """ASGI middleware refusing a request body over ``max_bytes`` with 413: at once when its Content-Length says so,
    else as soon as the body read so far passes it (so a chunked body is never held whole)."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        message = f"the request body is larger than the {self.max_bytes:,} bytes this server accepts"
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await _error(413, message)(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            event = await receive()
            if event["type"] == "http.request":
                received += len(event.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, message)  # FastAPI passes an HTTPException raised while reading through
            return event

        await self.app(scope, limited_receive, send)


def _validation_message(errors: Iterable[dict]) -> tuple[int, str]:
    """The status and one-line message of a body that is not JSON (400) or does not fit the schema (422)."""
    errors = list(errors)
    invalid_json = [error for error in errors if error.get("type") == "json_invalid"]
    if invalid_json:
        reason = (invalid_json[0].get("ctx") or {}).get("error", "JSON decode error")
        return 400, f"the request body is not valid JSON ({reason})"
    parts = []
    for error in errors[:_SHOWN_SENTENCES]:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body") or "the body"
        parts.append(f"{where}: {error.get('msg')}")
    more = f" and {len(errors) - _SHOWN_SENTENCES} more" if len(errors) > _SHOWN_SENTENCES else ""
    return 422, "the request does not fit the schema (see /docs): " + "; ".join(parts) + more


def create_app(engines: dict[str, Engine], batching: BatchingConfig | None = None,
               limits: RequestLimits | None = None) -> FastAPI:
    """The service for ``engines`` (name -> engine; the first is the default model), each with a batcher of its own.
    The batchers start with the application and, at shutdown, finish what waits before they stop."""
    batching = batching or BatchingConfig()
    limits = limits or RequestLimits()
    if not engines:
        raise ValueError("the server needs at least one model")
    if limits.max_sentences > batching.max_queue_sentences:
        raise ValueError(f"max_sentences ({limits.max_sentences}) must be <= max_queue_sentences "
                         f"({batching.max_queue_sentences}): a request that large could never be queued")
    names = list(engines)
    default = names[0]
    metrics = ServingMetrics()
    batchers = {name: Batcher(engine, batching, metrics, name) for name, engine in engines.items()}

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for batcher in batchers.values():
            batcher.start()
        yield
        for batcher in batchers.values():
            await batcher.close()

    app = FastAPI(title="hf_s2s translation service", version=__version__, lifespan=lifespan,
                  description="Translation with hf_s2s models, dynamically batched. Served: "
                              + ", ".join(f"{name} ({engine.model_type}, {engine.name} {engine.weights})"
                                          for name, engine in engines.items()))
    app.add_middleware(_BodySizeLimit, max_bytes=limits.max_request_bytes)
    errors = {status: {"model": schemas.Error} for status in (400, 404, 413, 422, 500, 503)}

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, error: RequestValidationError):
        status, message = _validation_message(error.errors())
        if request.url.path == "/translate":
            metrics.requests.labels("", str(status)).inc()
        return _error(status, message, detail=jsonable_encoder(error.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error: StarletteHTTPException):
        return _error(error.status_code, str(error.detail), headers=getattr(error, "headers", None))

    @app.post("/translate", response_model=schemas.TranslateResponse, response_model_exclude_none=True,
              responses=errors, summary="Translate sentences")
    async def translate(request: schemas.TranslateRequest):
        start = time.perf_counter()
        name = request.model if request.model is not None else default
        known = name in engines
        try:
            if not known:
                raise ServiceError(404, f"unknown model {name!r}; this server serves {', '.join(map(repr, names))}")
            engine = engines[name]
            lengths, options = _check_request(request, engine, limits)
            try:
                translations = await batchers[name].translate(request.sentences, lengths, options,
                                                              scores=request.scores, alignment=request.alignment)
            except QueueFull as error:
                raise ServiceError(503, str(error), headers={"Retry-After": "1"}) from None
            except Closing as error:
                raise ServiceError(503, str(error)) from None
            except Exception as error:  # a failed batch: this request fails, the server goes on
                raise ServiceError(500, f"decoding failed: {type(error).__name__}: {error}") from None
        except ServiceError as error:
            metrics.requests.labels(name if known else "", str(error.status)).inc()
            return _error(error.status, error.message, headers=error.headers)
        answer = schemas.TranslateResponse(model=name, translations=[
            _translation(translation, request.scores, options) for translation in translations])
        target = target_side(engine.tokenizer)
        metrics.requests.labels(name, "200").inc()
        metrics.sentences.labels(name).inc(len(request.sentences))
        metrics.source_tokens.labels(name).inc(sum(lengths))
        metrics.target_tokens.labels(name).inc(sum(map(len, target([t.text for t in answer.translations])["input_ids"])))
        metrics.latency.labels(name).observe(time.perf_counter() - start)
        return answer

    @app.get("/health", response_model=schemas.Health, summary="Whether the server is up, and its queue")
    async def health():
        return schemas.Health(status="ok", models=names,
                              queued_sentences=sum(batcher.queued_sentences for batcher in batchers.values()))

    @app.get("/models", response_model=list[schemas.ModelInfo], summary="The served models")
    async def models():
        return [schemas.ModelInfo(name=name, default=name == default, **engine.describe())
                for name, engine in engines.items()]

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def prometheus_metrics():
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    app.state.batchers = batchers  # for tests and benchmarks
    return app


def _check_request(request: schemas.TranslateRequest, engine: Engine, limits: RequestLimits
                   ) -> tuple[list[int], DecodingOptions]:
    """Each sentence's source tokens and the request's complete decoding options, or the ServiceError refusing it."""
    count = len(request.sentences)
    if count == 0:
        raise ServiceError(422, "sentences is empty: give at least one sentence to translate")
    if count > limits.max_sentences:
        raise ServiceError(413, f"{count} sentences in one request; this server takes at most {limits.max_sentences}: "
                                "split the request")
    try:
        options = engine.options(num_beams=request.num_beams, num_return_sequences=request.num_return_sequences,
                                 max_len_a=request.max_len_a, max_len_b=request.max_len_b,
                                 no_length_bound=request.no_length_bound)
        if request.alignment:
            engine.check_alignment()
    except ValueError as error:
        raise ServiceError(422, str(error)) from None
    if options.num_beams > limits.max_beams:
        given = "num_beams" if request.num_beams is not None else "the model's default num_beams"
        raise ServiceError(422, f"{given} is {options.num_beams}; this server decodes with at most {limits.max_beams} "
                                "beams")
    lengths = [len(ids) for ids in engine.tokenizer(request.sentences)["input_ids"]]
    limit = min(filter(None, (limits.max_sentence_tokens, engine.source_limit())))
    over = [(index, length) for index, length in enumerate(lengths) if length > limit]
    if over:
        named = ", ".join(f"sentence {index} ({length} tokens)" for index, length in over[:_SHOWN_SENTENCES])
        more = f" and {len(over) - _SHOWN_SENTENCES} more" if len(over) > _SHOWN_SENTENCES else ""
        raise ServiceError(422, f"{len(over)} of {count} sentences are longer than the {limit} source tokens this "
                                f"server reads (</s> included): {named}{more} (counted from 0); shorten or split them")
    return lengths, options


def _translation(translation: Translation, scores: bool, options: DecodingOptions) -> schemas.Translation:
    best = translation.hypotheses[0]
    nbest = None
    if options.num_return_sequences > 1:
        nbest = [schemas.Hypothesis(text=h.text, score=h.score if scores else None) for h in translation.hypotheses]
    alignment = None
    if translation.alignment is not None:
        alignment = schemas.Alignment(**vars(translation.alignment))
    return schemas.Translation(text=best.text, score=best.score if scores else None, hypotheses=nbest,
                               alignment=alignment)


__all__ = ["create_app"]
