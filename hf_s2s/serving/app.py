"""The FastAPI application: ``POST /translate``, ``GET /health``, ``GET /models``, ``GET /metrics`` (Prometheus), the
OpenAPI page at ``/docs``, and the attention explorer at ``/``: a page of plain HTML, CSS and JavaScript shipped in
the package (``static/``), which calls ``/models`` and ``/translate`` and fetches nothing from another host (its
Content-Security-Policy allows this server only).

Every answer of the API is JSON; a refusal is ``{"error": "..."}`` with a 4xx status, decided before the
request reaches the queue, so that nothing a client sends can stop the batcher:

- 400: the body is not JSON (nor UTF-8 text, or nested too deeply to read);
- 404: an unknown model name (the answer names the served ones), or path; 405: a method other than POST on
  ``/translate``;
- 413: a body over ``max_request_bytes``, more than ``max_sentences`` sentences, or a request whose answer or memory
  would pass ``max_answer_bytes`` or ``max_request_memory`` (predicted before it is queued: :mod:`.sizes`);
- 422: a body that does not fit the schema (wrong types, unknown fields), no sentences, a sentence the tokenizer
  cannot read or over the length limit, impossible options (``num_return_sequences`` above ``num_beams``, a bound of
  0 tokens, an alignment from a model or engine that has none, more beams than ``max_beams``, a glossary or a
  shortlist for an engine that cannot decode them or a folder without a shortlist, a glossary entry that is not one
  [source, target] pair);
- 503: the model's queue is full (with ``Retry-After``), or the server is shutting down: it takes no new request, and
  those it could not decode by the graceful timeout are answered so (:func:`drain`).

A failure while decoding is a 500 for the requests of that batch, and any other failure a 500 for its request; the
service goes on. A request whose client went away is withdrawn from the queue undecoded; it is counted with status
499 (nginx's "client closed request"), which no client receives. ``hf_s2s_requests_total`` counts every answer to
``/translate`` by the status the client was sent (:class:`_CountAnswers`).
"""

import asyncio
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..inference.engines import DecodingOptions, Engine
from ..models.term_constraints import Glossary, not_text
from ..models.version import __version__
from . import explorer, schemas
from .batching import Abandoned, Batcher, Closing, QueueFull, Translation
from .config import BatchingConfig, RequestLimits
from .folders import shown_folder
from .metrics import CONTENT_TYPE, ServingMetrics
from .sizes import Prediction, RequestCosts, RequestTooLarge

# Sentences named one by one in the refusal of sentences over the length limit; the count says how many more.
_SHOWN_SENTENCES = 5
# The status counted for a request whose client went away before its answer (nginx's "client closed request"); no
# client receives it.
CLIENT_GONE = 499
# The attention explorer's files (package data): index.html at /, the rest under /static.
EXPLORER_FILES = Path(__file__).with_name("static")
# The page may load and call this server only: nothing from another host, no inline script.
EXPLORER_POLICY = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"


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


class _CountAnswers:
    """ASGI middleware counting every answer to ``/translate`` in ``hf_s2s_requests_total`` by the status the client
    was sent, whichever layer sent it (the body size limit, FastAPI's validation, the handler), labelled with the
    model the handler chose (``request.state.model``; empty before that). A request cut off by uvicorn's own
    graceful timeout (or a second Ctrl-C) is answered 503 here instead of uvicorn's 500 text/plain, and an unexpected
    failure is counted 500 as the application's exception handler answers it."""

    def __init__(self, app, metrics: ServingMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/translate":
            return await self.app(scope, receive, send)
        state = scope.setdefault("state", {})  # the dict request.state writes into
        status = None

        async def counted_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted_send)
        except asyncio.CancelledError:
            if status is None:
                status = 503
                await _error(503, "the server stopped before this request was answered: retry")(scope, receive, send)
            raise
        except Exception:
            status = status or 500  # Starlette's ServerErrorMiddleware answers it, outside this middleware
            raise
        finally:
            if status is not None:
                self.metrics.requests.labels(state.get("model", ""), str(status)).inc()


async def _client_gone(receive) -> None:
    """Returns once the client has closed its connection (ASGI's ``http.disconnect``): the body was read already, so
    nothing else arrives on ``receive``."""
    while (await receive())["type"] != "http.disconnect":
        pass


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
               limits: RequestLimits | None = None, show_folder_paths: bool = False) -> FastAPI:
    """The service for ``engines`` (name -> engine; the first is the default model), each with a batcher of its own.
    The batchers start with the application and, at shutdown, finish what waits before they stop. ``GET /models``
    names each folder as the engine was opened on it, an absolute path by its last component only, unless
    ``show_folder_paths`` (:func:`hf_s2s.serving.folders.shown_folder`)."""
    batching = batching or BatchingConfig()
    limits = limits or RequestLimits()
    if not engines:
        raise ValueError("the server needs at least one model")
    if limits.max_sentences > batching.max_queue_sentences:
        raise ValueError(f"max_sentences ({limits.max_sentences}) must be <= max_queue_sentences "
                         f"({batching.max_queue_sentences}): a request that large could never be queued")
    for name, engine in engines.items():
        _check_defaults(name, engine, limits)
    names = list(engines)
    default = names[0]
    metrics = ServingMetrics()
    costs = {name: RequestCosts.of(engine, limits.max_answer_bytes, limits.max_request_memory)
             for name, engine in engines.items()}
    batchers = {name: Batcher(engine, batching, metrics, name, costs[name]) for name, engine in engines.items()}
    # Requests are tokenized on a thread of their own, one at a time (a fast tokenizer is not safe to share between
    # threads that call it at once), so the event loop goes on reading and answering meanwhile.
    tokenizing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf_s2s-tokenizer")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for batcher in batchers.values():
            batcher.start()
        yield
        for batcher in batchers.values():
            await batcher.close()
        tokenizing.shutdown(wait=True)

    app = FastAPI(title="hf_s2s translation service", version=__version__, lifespan=lifespan,
                  description="Translation with hf_s2s models, dynamically batched. Served: "
                              + ", ".join(f"{name} ({engine.model_type}, {engine.name} {engine.weights})"
                                          for name, engine in engines.items()))
    openapi = app.openapi
    app.openapi = lambda: schemas.with_limits(openapi(), names, limits)  # /openapi.json states this server's limits
    app.add_middleware(_BodySizeLimit, max_bytes=limits.max_request_bytes)
    app.add_middleware(_CountAnswers, metrics=metrics)  # added last: outside the size limit, so its 413s count
    errors = {status: {"model": schemas.Error} for status in (400, 404, 405, 413, 422, 500, 503)}

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, error: RequestValidationError):
        status, message = _validation_message(error.errors())
        return _error(status, message, detail=jsonable_encoder(error.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error: StarletteHTTPException):
        message = str(error.detail)
        if error.status_code == 400 and error.__cause__ is not None:  # FastAPI could not read the body
            message = f"the request body is not valid JSON ({type(error.__cause__).__name__}: {error.__cause__})"
        return _error(error.status_code, message, headers=getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def internal_error(request, error: Exception):
        # Starlette's ServerErrorMiddleware answers with this, then re-raises: uvicorn logs the traceback
        return _error(500, f"the server failed on this request ({type(error).__name__}: {error}); its log has the "
                           "details")

    @app.post("/translate", response_model=schemas.TranslateResponse, response_model_exclude_none=True,
              responses=errors, summary="Translate sentences")
    async def translate(body: schemas.TranslateRequest, request: Request):
        start = time.perf_counter()
        name = body.model if body.model is not None else default
        try:
            if name not in engines:
                raise ServiceError(404, f"unknown model {name!r}; this server serves {', '.join(map(repr, names))}")
            request.state.model = name  # the label _CountAnswers counts the answer under
            engine = engines[name]
            options = _check_options(body, engine, limits)
            # the tokenizer off the event loop, on the one thread that tokenizes for this server
            encoded = await asyncio.get_running_loop().run_in_executor(tokenizing, _source_ids, body, engine, limits,
                                                                       options)
            lengths = [len(ids) for ids in encoded]
            prediction = _check_cost(costs[name], body, lengths, options)
            try:
                translations = await batchers[name].translate(body.sentences, lengths, options, scores=body.scores,
                                                              alignment=body.alignment,
                                                              output_attentions=body.output_attentions,
                                                              forced=body.attention is not None,
                                                              memory=prediction.answer_memory,
                                                              gone=lambda: _client_gone(request.receive),
                                                              encoded=encoded)
            except QueueFull as error:
                raise ServiceError(503, str(error), headers={"Retry-After": "1"}) from None
            except Closing as error:
                raise ServiceError(503, str(error)) from None
            except Abandoned as error:  # nobody reads this answer; _CountAnswers counts it
                raise ServiceError(CLIENT_GONE, str(error)) from None
            except Exception as error:  # a failed batch: this request fails, the server goes on
                raise ServiceError(500, f"decoding failed: {type(error).__name__}: {error}") from None
        except ServiceError as error:
            return _error(error.status, error.message, headers=error.headers)
        # the answer as TranslateResponse (the response_model, for /docs) writes it, built directly: FastAPI does not
        # validate and re-encode a response it is handed
        answer = {"model": name, "translations": [_translation(translation, body, options, engine.tokenizer)
                                                  for translation in translations]}
        if body.scores:  # what the scores are
            answer["engine"] = f"{engine.name} {engine.weights}"
            answer["search"] = explorer.search_answer(options).model_dump(mode="json", exclude_none=True)
        answer = JSONResponse(answer)
        metrics.sentences.labels(name).inc(len(body.sentences))
        metrics.source_tokens.labels(name).inc(sum(lengths))
        metrics.target_tokens.labels(name).inc(sum(translation.target_tokens for translation in translations))
        metrics.latency.labels(name).observe(time.perf_counter() - start)
        return answer

    @app.get("/health", response_model=schemas.Health, summary="Whether the server is up, and its queue")
    async def health():
        return schemas.Health(status="ok", models=names,
                              queued_sentences=sum(batcher.queued_sentences for batcher in batchers.values()))

    @app.post("/score", response_model=schemas.ScoreResponse, response_model_exclude_none=True, responses=errors,
              summary="Read given translations (forced decoding)")
    async def score(body: schemas.ScoreRequest):
        name = body.model if body.model is not None else default
        try:
            if name not in engines:
                raise ServiceError(404, f"unknown model {name!r}; this server serves {', '.join(map(repr, names))}")
            engine = engines[name]
            _check_count(body.sentences, limits)
            try:
                engine.check_forced()
                explorer.check_view_request(engine, body.attention)
                targets, target_lengths = explorer.score_targets(engine, body, _source_tokens_limit(engine, limits))
            except ValueError as error:
                raise ServiceError(422, str(error)) from None
            lengths = [len(ids) for ids in _check_sentences(body.sentences, engine, limits)]
            try:
                costs[name].check_scored(lengths, target_lengths, body.attention)
            except RequestTooLarge as error:
                raise ServiceError(413, str(error)) from None
            try:
                forced = await batchers[name].call(engine.force_decode, body.sentences, targets,
                                                   batch_size=len(targets), output_attentions=body.attention is not None)
            except Closing as error:
                raise ServiceError(503, str(error)) from None
        except ServiceError as error:
            return _error(error.status, error.message, headers=error.headers)
        return schemas.ScoreResponse(model=name, scores=[explorer.scored_answer(pair, body.attention, engine.tokenizer)
                                                         for pair in forced])

    @app.get("/models", response_model=list[schemas.ModelInfo], summary="The served models")
    async def models():
        return [schemas.ModelInfo(name=name, default=name == default,
                                  attention_type=getattr(engine.config, "attention_type", None),
                                  attention=explorer.attention_shapes(engine),
                                  max_sentence_tokens=_source_tokens_limit(engine, limits),
                                  max_sentences=limits.max_sentences, max_beams=limits.max_beams,
                                  **{**engine.describe(), "folder": shown_folder(engine.folder, show_folder_paths)})
                for name, engine in engines.items()]

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def prometheus_metrics():
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get("/", include_in_schema=False)
    async def explorer_page():
        return FileResponse(EXPLORER_FILES / "index.html", headers={"Content-Security-Policy": EXPLORER_POLICY})

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon():  # the page names its icon; a browser asks for /favicon.ico elsewhere (the API's pages)
        return FileResponse(EXPLORER_FILES / "favicon.svg", media_type="image/svg+xml")

    app.mount("/static", StaticFiles(directory=EXPLORER_FILES), name="static")
    app.state.batchers = batchers  # for drain(), tests and benchmarks
    app.state.metrics = metrics
    return app


def drain(app: FastAPI, timeout: float) -> None:
    """Begin ``app``'s graceful shutdown (the server calls it as uvicorn's begins): new requests are answered 503, the
    waiting ones are decoded for at most ``timeout`` seconds, and those still unanswered then are answered 503."""
    for batcher in app.state.batchers.values():
        batcher.drain(timeout)


def _check_defaults(name: str, engine: Engine, limits: RequestLimits) -> None:
    """A ValueError where the options a request gets by naming none (the model's generation config) would be refused:
    said once at start rather than to every such request."""
    try:
        defaults = engine.options()
    except ValueError as error:
        raise ValueError(f"model {name!r} ({engine.folder}): its generation config cannot decode: {error}") from None
    if defaults.num_beams > limits.max_beams:
        raise ValueError(f"model {name!r} ({engine.folder}) decodes with {defaults.num_beams} beams by default (its "
                         f"generation config) and max_beams (--max-beams) is {limits.max_beams}: every request that "
                         "names no num_beams would be refused; raise --max-beams")


def _check_options(request: schemas.TranslateRequest, engine: Engine, limits: RequestLimits) -> DecodingOptions:
    """The request's complete decoding options, or the ServiceError refusing the request or its options."""
    _check_count(request.sentences, limits)
    try:
        options = engine.options(num_beams=request.num_beams, num_return_sequences=request.num_return_sequences,
                                 max_len_a=request.max_len_a, max_len_b=request.max_len_b,
                                 no_length_bound=request.no_length_bound, shortlist=request.shortlist,
                                 glossary=_glossary(request.glossary))
        explorer.check_view_request(engine, request.attention)
        if request.alignment or request.output_attentions or request.attention is not None:
            engine.check_alignment()
            if options.glossary is not None or options.shortlist:
                raise ValueError("an alignment is the attention of a translation decoded without the glossary and "
                                 "the shortlist, which this request asks for: ask for the alignment or for them")
    except ValueError as error:
        raise ServiceError(422, str(error)) from None
    if options.num_beams > limits.max_beams:
        given = "num_beams" if request.num_beams is not None else "the model's default num_beams"
        raise ServiceError(422, f"{given} is {options.num_beams}; this server decodes with at most {limits.max_beams} "
                                "beams")
    return options


def _source_ids(request: schemas.TranslateRequest, engine: Engine, limits: RequestLimits,
                options: DecodingOptions) -> list[list[int]]:
    """Each sentence's source ids (what the engine decodes, so it does not tokenize them again), or the ServiceError
    refusing a sentence the tokenizer cannot read, one over the length limit, or one whose glossary terms together
    are longer than the model may write."""
    encoded = _check_sentences(request.sentences, engine, limits)
    if options.glossary is not None:  # each sentence's terms fit in what the model may write
        try:
            options.glossary.target_terms(encoded, engine.tokenizer, options.max_new_tokens, first=1)
        except ValueError as error:
            raise ServiceError(422, str(error)) from None
    return encoded


def _source_tokens_limit(engine: Engine, limits: RequestLimits) -> int:
    """The most source tokens (</s> included) this server reads of a sentence for ``engine``."""
    return min(filter(None, (limits.max_sentence_tokens, engine.source_limit())))


def _check_count(sentences: list[str], limits: RequestLimits) -> None:
    """The ServiceError refusing no sentences, or more than a request may hold."""
    if not sentences:
        raise ServiceError(422, "sentences is empty: give at least one sentence")
    if len(sentences) > limits.max_sentences:
        raise ServiceError(413, f"{len(sentences)} sentences in one request; this server takes at most "
                                f"{limits.max_sentences}: split the request")


def _check_sentences(sentences: list[str], engine: Engine, limits: RequestLimits) -> list[list[int]]:
    """Each sentence's source ids, or the ServiceError refusing sentences the tokenizer cannot read or that are over
    the length limit."""
    count = len(sentences)
    try:
        encoded = engine.tokenizer(sentences)["input_ids"]
    except Exception:  # the tokenizer's own message names no sentence: find them
        unreadable = [(index, problem) for index, sentence in enumerate(sentences)
                      if (problem := _reading_problem(engine.tokenizer, sentence)) is not None]
        if not unreadable:  # each reads alone: not the request's fault (a 500)
            raise
        named = "; ".join(f"sentence {index + 1}: {problem}" for index, problem in unreadable[:_SHOWN_SENTENCES])
        more = f"; and {len(unreadable) - _SHOWN_SENTENCES} more" if len(unreadable) > _SHOWN_SENTENCES else ""
        raise ServiceError(422, f"{len(unreadable)} of {count} sentences cannot be read by the model's tokenizer "
                                f"(counted from 1): {named}{more}") from None
    limit = _source_tokens_limit(engine, limits)
    over = [(index, len(ids)) for index, ids in enumerate(encoded) if len(ids) > limit]
    if over:
        named = ", ".join(f"sentence {index + 1} ({length} tokens)" for index, length in over[:_SHOWN_SENTENCES])
        more = f" and {len(over) - _SHOWN_SENTENCES} more" if len(over) > _SHOWN_SENTENCES else ""
        raise ServiceError(422, f"{len(over)} of {count} sentences are longer than the {limit} source tokens this "
                                f"server reads (</s> included): {named}{more} (counted from 1); shorten or split them")
    return encoded


def _check_cost(costs: RequestCosts, request: schemas.TranslateRequest, lengths: list[int],
                options: DecodingOptions) -> Prediction:
    """What the request will cost (:mod:`.sizes`), or the 413 refusing an answer or memory over the limits."""
    try:
        return costs.check(lengths, options, scores=request.scores, alignment=request.alignment,
                           output_attentions=request.output_attentions, view=request.attention)
    except RequestTooLarge as error:
        raise ServiceError(413, str(error)) from None


def _glossary(pairs: list[list[str]] | None) -> Glossary | None:
    """A request's glossary; a ValueError names an entry that is not one [source term, target term] pair."""
    if pairs is None:
        return None
    for index, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"glossary entry {index + 1} (counted from 1) has {len(pair)} strings; each entry is "
                             "[source term, target term]")
    if not pairs:
        raise ValueError("glossary is empty: give [source term, target term] pairs, or leave it out")
    return Glossary.from_pairs([tuple(pair) for pair in pairs])


def _reading_problem(tokenizer, sentence: str) -> str | None:
    """Why ``tokenizer`` cannot read ``sentence``, or None where it can. A lone UTF-16 surrogate, which a JSON string
    may escape (``"\\ud800"``) but which is no text, is named as such; any other failure by the tokenizer's message."""
    problem = not_text(sentence)
    if problem is not None:
        return problem
    try:
        tokenizer([sentence])
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


def _translation(translation: Translation, request: schemas.TranslateRequest, options: DecodingOptions,
                 tokenizer) -> dict:
    """One sentence's answer as :class:`schemas.Translation` writes it (fields that are None left out)."""
    if translation.forced is not None:  # the explorer's maps (a view asked for): built through the schema
        return _translation_with_maps(translation, request, options, tokenizer).model_dump(mode="json",
                                                                                         exclude_none=True)
    best, scores = translation.hypotheses[0], request.scores
    answer = {"text": best.text}
    if scores:
        answer["score"] = best.score
    if options.num_return_sequences > 1:
        answer["hypotheses"] = [{"text": h.text, "score": h.score} if scores else {"text": h.text}
                                for h in translation.hypotheses]
    if translation.alignment is not None:
        answer["alignment"] = {name: value for name, value in vars(translation.alignment).items() if value is not None}
    return answer


def _translation_with_maps(translation: Translation, request: schemas.TranslateRequest, options: DecodingOptions,
                           tokenizer) -> schemas.Translation:
    """One sentence's answer with each hypothesis' tokens, their log-probabilities and the map of the request's
    view (the best's at the top too)."""
    best, scores = translation.hypotheses[0], request.scores
    nbest = None
    if options.num_return_sequences > 1:
        nbest = [schemas.Hypothesis(text=h.text, score=h.score if scores else None) for h in translation.hypotheses]
    alignment = None if translation.alignment is None else schemas.Alignment(**vars(translation.alignment))
    answer = schemas.Translation(text=best.text, score=best.score if scores else None, hypotheses=nbest,
                                 alignment=alignment)
    for hypothesis, forced in zip(nbest or [answer], translation.forced, strict=True):
        explorer.with_attention(hypothesis, forced, request.attention, tokenizer)
    if nbest:
        answer.tokens, answer.token_log_probs, answer.attention = (
            nbest[0].tokens, nbest[0].token_log_probs, nbest[0].attention)
    return answer


__all__ = ["CLIENT_GONE", "create_app", "drain"]
