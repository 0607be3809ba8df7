"""Requests from many clients generated together: one thread owns the model and steps every running request's rows
in one batched forward (continuous batching, on `models.kv_cache.Decoder`). Pure PyTorch and threads, no paths.

A request (`BatchingEngine.steps`, the same contract as `models.generate.generated_steps`) queues its rows; the
engine admits waiting requests at the start of each step, as many as fit under `max_rows`: their prompts are computed
together in one forward (prefill), their cache stacked under the running rows' (`Decoder.join`), and from then on
one forward per step extends every row. When the engine is idle, the first request waits `window_s` for others to
arrive with it (a burst of clients starts as one batch). A row leaves the batch at its own end (its stop token, its
request's `max_new_tokens`, or its consumer gone), the others going on.

Each row keeps its own random draws (`RowDraws`, seeded with its request's seed) and is chosen with its own request's
temperature and top-k, and the decoder computes each row as it computes it alone (left padding, masked): a request
gets the tokens it gets alone, greedy or seeded, whatever it is batched with.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from models.generate import RowDraws, choose
from models.kv_cache import Decoder

MAX_ROWS = 32  # rows generated together at most: past this a step's forward costs about as much per row as alone
WINDOW_S = 0.005  # how long the first request to an idle engine waits for others to start with it


@dataclass(eq=False)
class Job:
    """One request's rows (`prompts`) and how to draw them; the engine sends each step's [(row, token)] to `out`,
    then None (or the exception that ended it). `cancelled` is set by the consumer when it stops listening."""

    prompts: list[list[int]]
    max_new_tokens: int
    temperature: float
    top_k: int | None
    seed: int
    stop_token: int | None
    out: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    cancelled: bool = False
    live: list[Row] = field(default_factory=list)  # its rows still generating, in order
    made: int = 0  # steps generated
    tokens: int = 0  # tokens generated, over all rows


@dataclass(eq=False)
class Row:
    """One running row: its name in the decoder, its index in its request, its own draws."""

    name: int
    index: int
    draws: RowDraws


class BatchingEngine:
    """The model's generation for a server: `steps` from any thread, generated in this engine's own thread
    (started at the first request) together with every other request running. `on_finished(tokens)` is told each
    request's output tokens once it ends (for metrics); `waiting` and `running_rows` say how loaded it is, `forwards` and
    `rows_stepped` how many steps it ran and how many rows they extended (their ratio: the mean batch)."""

    def __init__(self, model, max_rows: int = MAX_ROWS, window_s: float = WINDOW_S):
        if max_rows < 1:
            raise ValueError(f"max_rows = {max_rows}: the batch needs room for 1 row or more")
        self.model, self.max_rows, self.window_s = model, max_rows, window_s
        self.on_finished: Callable[[int], None] | None = None
        self._pending: list[Job] = []
        self._running: list[Job] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.forwards = 0  # steps run, and the rows they extended over all: their ratio is the mean batch
        self.rows_stepped = 0

    @property
    def waiting(self) -> int:
        return len(self._pending)

    @property
    def running_rows(self) -> int:
        return sum(len(job.live) for job in self._running)

    def steps(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        top_k: int | None,
        seed: int,
        stop_token: int | None,
    ) -> Iterator[list[tuple[int, int]]]:
        """What `generated_steps` yields for these prompts, generated with whatever else is running. Closing the
        iterator (or dropping it) takes the rows out of the batch at the next step."""
        if any(not p for p in prompts):
            raise ValueError("every prompt needs at least one token")
        job = Job([list(p) for p in prompts], max_new_tokens, temperature, top_k, seed, stop_token)
        if max_new_tokens < 1:
            return
        with self._wake:
            if self._closed:
                raise RuntimeError("the batching engine is closed: the server is stopping")
            self._pending.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="foundry-batching", daemon=True)
                self._thread.start()
                atexit.register(self.close)  # a thread stopped mid-forward at exit aborts the process
            self._wake.notify()
        try:
            while (item := job.out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            job.cancelled = True

    def close(self) -> None:
        """Stop the engine's thread once the step it is on ends; requests running or waiting end with an error."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        decoder = None
        while (admitted := self._admit()) is not None:
            if decoder is None or not decoder.active:
                decoder = Decoder(self.model, [])  # a fresh one: the rows' names start again from 0
            try:
                self._step(decoder, admitted)
            except Exception as exc:  # a failed step fails the requests in it, not the server
                for job in {*self._running, *admitted}:
                    job.out.put(exc)
                self._running, decoder = [], None
        stopped = RuntimeError("the batching engine is closed: the server is stopping")
        for job in [*self._running, *self._pending]:
            job.out.put(stopped)

    def _admit(self) -> list[Job] | None:
        """The waiting requests that fit beside the running rows (one at least when none run), after waiting for
        a first one, and `window_s` for more when the engine was idle; None once closed."""
        with self._wake:
            while not self._pending and not self._running and not self._closed:
                self._wake.wait()
            if self._closed:
                return None
            if not self._running:
                deadline = time.monotonic() + self.window_s
                while self._rows(self._pending) < self.max_rows and (left := deadline - time.monotonic()) > 0:
                    self._wake.wait(left)
            room, admitted = self.max_rows - self.running_rows, []
            while self._pending and (len(self._pending[0].prompts) <= room or not (self._running or admitted)):
                job = self._pending.pop(0)
                room -= len(job.prompts)
                if not job.cancelled:
                    admitted.append(job)
            return admitted

    @staticmethod
    def _rows(jobs: list[Job]) -> int:
        return sum(len(job.prompts) for job in jobs)

    @torch.no_grad()
    def _step(self, decoder: Decoder, admitted: list[Job]) -> None:
        """One token for every running row and the first for each admitted one, in one batched forward each."""
        self._leave(decoder, [job for job in self._running if job.cancelled])
        logits = [decoder.next_logits()] if decoder.active else []
        if admitted:
            joining = Decoder(self.model, [p for job in admitted for p in job.prompts])
            logits.append(joining.next_logits())
            names = iter(decoder.join(joining))
            for job in admitted:
                job.live = [Row(next(names), i, RowDraws(job.seed)) for i in range(len(job.prompts))]
            self._running.extend(admitted)
        if not logits:
            return
        chosen = self._choose(decoder, torch.cat(logits))
        self.forwards += 1
        self.rows_stepped += len(chosen)
        decoder.push([chosen[name] for name in decoder.active])
        ended = []
        for job in self._running:
            job.made += 1
            step = [(row.index, chosen[row.name]) for row in job.live]
            job.tokens += sum(token != job.stop_token for _, token in step)
            job.out.put(step)
            done = [row.name for row in job.live if chosen[row.name] == job.stop_token]
            job.live = [row for row in job.live if row.name not in done]
            decoder.drop(done)
            decoder.release(done)
            if job.made >= job.max_new_tokens or not job.live:
                ended.append(job)
        self._leave(decoder, ended)

    def _choose(self, decoder: Decoder, logits: torch.Tensor) -> dict[int, int]:
        """Each active row's token (by its name), chosen with its own request's sampling and draws: rows that
        sample alike chosen together (`choose` is row by row: a row's token does not depend on its neighbours)."""
        place = {name: i for i, name in enumerate(decoder.active)}
        groups: dict[tuple, list[Row]] = {}
        for job in self._running:
            groups.setdefault((job.temperature, job.top_k), []).extend(job.live)
        chosen = {}
        for (temperature, top_k), rows in groups.items():
            index = torch.tensor([place[row.name] for row in rows])
            tokens = choose(logits[index], temperature, top_k, [row.draws for row in rows])
            chosen.update(zip((row.name for row in rows), tokens, strict=True))
        return chosen

    def _leave(self, decoder: Decoder, jobs: list[Job]) -> None:
        """Take `jobs` out of the batch (ended, or their consumer gone) and tell their consumers."""
        for job in jobs:
            names = [row.name for row in job.live]
            decoder.drop(names)
            decoder.release(names)
            job.live = []
            job.out.put(None)
            if self.on_finished is not None:
                self.on_finished(job.tokens)
        self._running = [job for job in self._running if job not in jobs]
