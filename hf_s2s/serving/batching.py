"""Dynamic batching: the requests that arrive while the engine is busy, or within a few milliseconds of each other,
are decoded together, then split back to their requests.

One :class:`Batcher` per served model. Its loop takes the oldest waiting request and waits for more up to
``max_wait_ms`` after the later of that request's arrival and the end of the previous batch, then gathers the waiting
requests with the same decoding options, oldest first, up to ``max_batch_tokens`` source tokens (at once when they
fill it, or when as many requests have arrived since the previous batch ended as that batch answered). Counting the
wait from the end of the previous batch too lets the clients that batch answered send their next request in time to
join: without it, clients that each wait for their answer before sending again split into two groups whose requests
alternate on the engine, each batch holding about half of what waits (the load benchmark's 8 clients: about 11
sentences per engine call where 20 were in flight). Ending the wait once they are all back keeps a steady load from
paying the whole wait before every batch. Their sentences are sorted by length and cut into engine calls of at most
``max_batch_tokens`` padded tokens (sentences x the longest), run one at a time on the batcher's own thread. Requests with other options wait for a
later batch: options are never mixed within one.

A request's translations equal the ones it gets alone wherever the engine is batch-invariant (float32 torch,
CTranslate2; see :mod:`hf_s2s.inference.engines`): batching changes which sentences share an engine call, never the
options. A failure while decoding fails the requests of that batch (the app answers 500) and the loop goes on.

A request whose client goes away leaves the queue at once, undecoded (:class:`Abandoned`); one whose batch is on the
engine already is dropped from the engine calls still to come. At shutdown, :meth:`Batcher.drain` stops taking
requests and gives the waiting ones a deadline, after which they fail with :class:`Closing`: a client is answered
either way, and the process does not outlive the deadline by more than one engine call.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from ..data.corpus import is_blank
from ..data.tokenization import target_side
from ..inference.engines import Alignment, DecodingOptions, Engine
from ..inference.forced import ForcedTranslation
from ..inference.translate import Hypothesis
from .config import BatchingConfig
from .metrics import ServingMetrics
from .sizes import RequestCosts

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The model's queue holds too many sentences to take a request now."""


class Closing(Exception):
    """The server is shutting down: it takes no new request, and fails those it could not decode in time."""


class Abandoned(Exception):
    """The client went away before its translations were ready: the request left the queue undecoded."""


@dataclass
class Translation:
    """One sentence's answer: its hypotheses, best first, the alignment of the best when it was asked for, and the
    tokens of the best (the target tokenizer's, </s> included), counted with the rest of its engine call."""

    hypotheses: list[Hypothesis]
    alignment: Alignment | None = None
    target_tokens: int = 0
    forced: list[ForcedTranslation] | None = None  # each hypothesis read under teacher forcing, when asked for


@dataclass(eq=False)
class _Job:
    """A request waiting for its translations."""

    sentences: list[str]
    lengths: list[int]  # source tokens of each sentence
    encoded: list[list[int]] | None  # their source ids, when the request was tokenized already
    options: DecodingOptions
    scores: bool
    alignment: bool
    output_attentions: bool  # the alignment with every layer's and head's weights
    forced: bool  # each hypothesis read under teacher forcing, with its attention (the explorer's maps)
    future: asyncio.Future
    memory: int = 0  # bytes its answer takes, at most (hf_s2s.serving.sizes)
    arrived: float = field(default_factory=time.monotonic)


class Batcher:
    """Gathers the requests for one ``engine`` into batches (:class:`BatchingConfig`) and decodes them on a thread of
    its own. Start it with :meth:`start` inside the running event loop; at shutdown, :meth:`drain` sets the deadline
    of what waits and :meth:`close` finishes what is left, then stops. With ``costs``, a batch's answers together take
    no more memory than one request may, nor does any engine call (:mod:`hf_s2s.serving.sizes`)."""

    def __init__(self, engine: Engine, config: BatchingConfig, metrics: ServingMetrics | None = None,
                 name: str = "model", costs: RequestCosts | None = None):
        self.engine, self.config, self.metrics, self.name, self.costs = engine, config, metrics, name, costs
        self._pending: deque[_Job] = deque()
        self._decoding: list[_Job] = []  # the batch on the engine now
        self._queued_sentences = 0
        self._arrival: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._closing = False  # set by drain() or close(): no new request is taken
        self._batch_ended = -float("inf")  # time.monotonic() at the end of the previous batch
        self._answered = 0  # requests the previous batch answered
        self._returned = 0  # requests that arrived since the previous batch ended
        self._deadline: asyncio.TimerHandle | None = None  # drain()'s: fails what is still unanswered
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"hf_s2s-{name}")

    @property
    def queued_sentences(self) -> int:
        return self._queued_sentences

    def start(self) -> None:
        self._arrival = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher-{self.name}")

    def drain(self, timeout: float) -> None:
        """Begin the shutdown: take no new request (:class:`Closing`), go on decoding what waits for ``timeout``
        seconds, then fail every request still unanswered, waiting or on the engine, with :class:`Closing`."""
        self._closing = True
        if self._arrival is not None:
            self._arrival.set()  # a batch being gathered stops waiting for company
        if self._deadline is None:
            self._deadline = asyncio.get_running_loop().call_later(timeout, self._give_up)

    def _give_up(self) -> None:
        unanswered = [*self._decoding, *self._pending]
        self._pending.clear()
        self._queue_changed(-self._queued_sentences)
        for job in unanswered:
            if not job.future.done():
                job.future.set_exception(Closing("the server stopped before this request was translated: retry"))

    async def close(self) -> None:
        """Decode what still waits (nothing once :meth:`drain`'s deadline has passed), then stop the loop and its
        thread."""
        self._closing = True
        if self._task is not None:
            self._arrival.set()
            await self._task
        if self._deadline is not None:
            self._deadline.cancel()
        self._executor.shutdown(wait=True)

    async def translate(self, sentences: list[str], lengths: list[int], options: DecodingOptions, *,
                        scores: bool = False, alignment: bool = False, output_attentions: bool = False,
                        forced: bool = False, memory: int = 0, gone: Callable[[], Awaitable[None]] | None = None,
                        encoded: list[list[int]] | None = None) -> list[Translation]:
        """Queue one request and wait for its translations, one per sentence (with their alignments if ``alignment``,
        and every layer's and head's attention weights too if ``output_attentions``; each hypothesis read under
        teacher forcing, with its attention, if ``forced``; ``memory``: the bytes its answer takes,
        :class:`hf_s2s.serving.sizes.Prediction`'s ``answer_memory``). ``encoded``: each sentence's source ids by the
        engine's tokenizer, which the engine then does not compute again. :class:`QueueFull` when the queue
        cannot take its sentences; :class:`Closing` once the batcher is shutting down, or when its deadline passed
        before the request was decoded. ``gone()`` returns when the client has gone away: the request then leaves
        the queue undecoded (:class:`Abandoned`); so does a request whose task is cancelled."""
        if self._closing:
            raise Closing("the server is shutting down and takes no new request: retry")
        if self._queued_sentences + len(sentences) > self.config.max_queue_sentences:
            raise QueueFull(f"{self._queued_sentences} sentences are waiting for {self.name!r} and the queue holds "
                            f"{self.config.max_queue_sentences}: retry later")
        job = _Job(sentences, lengths, encoded, options, scores, alignment or output_attentions, output_attentions,
                   forced, asyncio.get_running_loop().create_future(), memory)
        self._pending.append(job)
        self._returned += 1
        self._queue_changed(len(sentences))
        self._arrival.set()
        watcher = asyncio.ensure_future(gone()) if gone is not None else None
        try:
            await asyncio.wait([job.future] if watcher is None else [job.future, watcher],
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            if watcher is not None:
                watcher.cancel()
            if not job.future.done():  # the client went away, or this task was cancelled
                self._withdraw(job)
        if job.future.cancelled():
            raise Abandoned(f"the client went away before its {len(sentences)} sentences were translated")
        return job.future.result()

    def _withdraw(self, job: _Job) -> None:
        """Take ``job`` off the queue, or out of the engine calls of its batch still to come."""
        job.future.cancel()
        if job in self._pending:
            self._pending.remove(job)
            self._queue_changed(-len(job.sentences))

    def _queue_changed(self, sentences: int) -> None:
        self._queued_sentences += sentences
        if self.metrics is not None:
            self.metrics.queue_sentences.labels(self.name).set(self._queued_sentences)
            self.metrics.queue_requests.labels(self.name).set(len(self._pending))

    async def _loop(self) -> None:
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._arrival.clear()
                await self._arrival.wait()
                continue
            jobs = await self._gather()
            if not jobs:  # the requests waited for were withdrawn meanwhile
                continue
            self._decoding = jobs
            try:
                results = await self._decode(jobs)
            except Exception as error:  # a failed batch fails its requests, never the loop
                logger.exception("decoding a batch of %d requests failed", len(jobs))
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(error)
                continue
            finally:
                self._decoding = []
                self._batch_ended = time.monotonic()
                self._answered, self._returned = len(jobs), 0
            for job, result in zip(jobs, results, strict=True):
                if not job.future.done():  # else withdrawn (its client went away) or given up at shutdown
                    job.future.set_result(result)

    async def _gather(self) -> list[_Job]:
        """The next batch's requests, taken off the queue: the oldest and those that may join it (none where every
        waiting request was withdrawn while the batch was gathered)."""
        while True:
            if not self._pending:
                return []
            first = self._pending[0]  # read again after each wait: the oldest may have been withdrawn
            jobs = self._joining(first)
            full = not self.config.batching or sum(map(sum, (job.lengths for job in jobs))) >= self.config.max_batch_tokens
            back = 0 < self._answered <= self._returned  # as many have come since as the previous batch answered
            waiting_since = max(first.arrived, self._batch_ended)
            remaining = waiting_since + self.config.max_wait_ms / 1000 - time.monotonic()
            if full or back or remaining <= 0 or self._closing:
                break
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), remaining)
            except asyncio.TimeoutError:
                pass
        for job in jobs:
            self._pending.remove(job)
        self._queue_changed(-sum(len(job.sentences) for job in jobs))
        return jobs

    def _joining(self, first: _Job) -> list[_Job]:
        """``first`` and the waiting requests of its options, oldest first, while their tokens fit the budget and
        their answers the memory one request may take."""
        if not self.config.batching:
            return [first]
        jobs, tokens, memory = [], 0, 0
        budget = self.costs.max_memory if self.costs is not None else None
        for job in self._pending:
            if job.options != first.options:
                continue
            if jobs and (tokens + sum(job.lengths) > self.config.max_batch_tokens
                         or (budget is not None and memory + job.memory > budget)):
                break
            jobs.append(job)
            tokens += sum(job.lengths)
            memory += job.memory
        return jobs

    async def _decode(self, jobs: list[_Job]) -> list[list[Translation] | None]:
        """The translations of every job's sentences, decoded in length-sorted engine calls within the budget; None
        for a job answered meanwhile (withdrawn, or given up at shutdown), whose sentences the calls still to come
        leave out."""
        loop = asyncio.get_running_loop()
        options, scores = jobs[0].options, any(job.scores for job in jobs)
        items = sorted(((length, j, i) for j, job in enumerate(jobs) for i, length in enumerate(job.lengths)),
                       reverse=True)  # (tokens, job, sentence), longest first
        translations: dict[tuple[int, int], Translation] = {}
        fits = None if self.costs is None else lambda lengths: self.costs.call_fits(lengths, options, scores)
        for call in _engine_calls([length for length, _, _ in items], self.config.max_batch_tokens, fits):
            call = [k for k in call if not jobs[items[k][1]].future.done()]
            if not call:
                continue
            keys = [items[k][1:] for k in call]
            sentences = [jobs[j].sentences[i] for j, i in keys]
            encoded = None
            if all(jobs[j].encoded is not None for j, _ in keys):
                encoded = [jobs[j].encoded[i] for j, i in keys]
            if self.metrics is not None:
                self.metrics.batch_sentences.labels(self.name).observe(len(call))
                self.metrics.batch_tokens.labels(self.name).observe(len(call) * items[call[0]][0])
            decoded = await loop.run_in_executor(self._executor, self._translate, sentences, options, scores, encoded)
            translations.update(zip(keys, decoded, strict=True))
        results: list[list[Translation] | None] = []
        for j, job in enumerate(jobs):
            if job.future.done():
                results.append(None)
                continue
            translations_of_job = [translations[j, i] for i in range(len(job.sentences))]
            if job.alignment:
                for translation, sentence in zip(translations_of_job, job.sentences, strict=True):
                    if is_blank(sentence):  # not decoded (an empty translation): there is no attention to show
                        continue
                    translation.alignment = await loop.run_in_executor(self._executor, self.engine.alignment,
                                                                       sentence, options, job.output_attentions)
            if job.forced:
                forced = await loop.run_in_executor(self._executor, self._force, job.sentences, options)
                for translation, hypotheses in zip(translations_of_job, forced, strict=True):
                    translation.forced = hypotheses or None  # a blank sentence has none
            results.append(translations_of_job)
        return results

    def _translate(self, sentences: list[str], options: DecodingOptions, scores: bool,
                   encoded: list[list[int]] | None) -> list[Translation]:
        """One engine call, on the batcher's thread, with the tokens of each best translation counted (one tokenizer
        call for the call's sentences, off the event loop)."""
        decoded = self.engine.translate(sentences, options, batch_size=len(sentences), scores=scores, encoded=encoded)
        counts = [len(ids) for ids in target_side(self.engine.tokenizer)([h[0].text for h in decoded])["input_ids"]]
        return [Translation(hypotheses, target_tokens=count) for hypotheses, count in zip(decoded, counts, strict=True)]

    def _force(self, sentences: list[str], options: DecodingOptions) -> list[list[ForcedTranslation]]:
        return self.engine.force_hypotheses(sentences, options, batch_size=len(sentences))

    async def call(self, function: Callable, *args, **kwargs):
        """``function(*args, **kwargs)`` on the engine's thread, after the engine call in progress (the engine is used
        by one thread at a time: reading attention switches the model's attention kernel); :class:`Closing` once
        the batcher is shutting down."""
        if self._closing:
            raise Closing("the server is shutting down and takes no new request: retry")
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(function, *args, **kwargs))


def _engine_calls(lengths: list[int], max_tokens: int,
                  fits: Callable[[list[int]], bool] | None = None) -> list[list[int]]:
    """Positions of ``lengths`` (sorted longest first) cut into runs whose padded size, count x the first (longest)
    length, stays within ``max_tokens``, and which ``fits`` (given a run's lengths; None: any) lets one engine call
    decode; a sentence that fits neither alone makes a call of its own."""
    calls: list[list[int]] = []
    for position in range(len(lengths)):
        if calls and (len(calls[-1]) + 1) * lengths[calls[-1][0]] <= max_tokens and (
                fits is None or fits([lengths[p] for p in (*calls[-1], position)])):
            calls[-1].append(position)
        else:
            calls.append([position])
    return calls


__all__ = ["Abandoned", "Batcher", "Closing", "QueueFull", "Translation"]
