"""Requests from many clients generated together: one thread owns the model and steps every running request's rows
in one batched forward (continuous batching, on `models.kv_cache.Decoder`). Pure PyTorch and threads, no paths.

A request (`BatchingEngine.steps`, the same contract as `models.generate.generated_steps`) queues its rows; the
engine admits waiting requests at the start of each step, as many as fit under `max_rows`: their prompts are computed
together in one forward (prefill), their cache stacked under the running rows' (`Decoder.join`), and from then on
one forward per step extends every row. When the engine is idle, the first request waits `window_s` for others to
arrive with it (a burst of clients starts as one batch). A row leaves the batch at its own end (its stop token, its
request's `max_new_tokens`, or its consumer gone), the others going on. A request whose rows may outgrow the context
(prompt and `max_new_tokens` past block_size) runs in a second lane, its own batch: past the context a decoder
recomputes every row's window each step, and it would make the rows beside it do so too.

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
from models.request_limits import TimeLimit

MAX_ROWS = 32  # rows generated together at most: past this a step's forward costs about as much per row as alone
WINDOW_S = 0.005  # how long the first request to an idle engine waits for others to start with it
FITS, SLIDES = 0, 1  # the lanes: rows that stay within the context, and rows that may outgrow it


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
    lane: int = 0  # FITS, or SLIDES: a row may outgrow the context
    live: list[Row] = field(default_factory=list)  # its rows still generating, in order
    made: int = 0  # steps generated
    tokens: int = 0  # tokens generated, over all rows


@dataclass(eq=False)
class Row:
    """One running row: its lane and its name in that lane's decoder, its index in its request, its own draws."""

    name: tuple[int, int]
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
        deadline: float | None = None,
    ) -> Iterator[list[tuple[int, int]]]:
        """What `generated_steps` yields for these prompts, generated with whatever else is running. Closing the
        iterator (or dropping it) takes the rows out of the batch at the next step. Past `deadline`
        (`time.monotonic()`), `TimeLimit`, whether the rows run or still wait in the queue."""
        if any(not p for p in prompts):
            raise ValueError("every prompt needs at least one token")
        job = Job([list(p) for p in prompts], max_new_tokens, temperature, top_k, seed, stop_token)
        longest = max(map(len, prompts), default=0) + max_new_tokens
        job.lane = SLIDES if longest > self.model.config.block_size else FITS
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
        steps = 0
        try:
            while (item := self._next(job, deadline, steps)) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
                steps += 1
        finally:
            job.cancelled = True

    @staticmethod
    def _next(job: Job, deadline: float | None, steps: int):
        """The job's next step from the engine; `TimeLimit` once `deadline` passes before it comes."""
        if deadline is None:
            return job.out.get()
        left = deadline - time.monotonic()
        try:
            if left > 0:
                return job.out.get(timeout=left)
        except queue.Empty:
            pass
        raise TimeLimit(steps)

    def close(self) -> None:
        """Stop the engine's thread once the step it is on ends; requests running or waiting end with an error."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        lanes = self._fresh_lanes()
        while (admitted := self._admit()) is not None:
            lanes = [lane if lane.active else Decoder(self.model, []) for lane in lanes]  # names start again at 0
            try:
                self._step(lanes, admitted)
            except Exception as exc:  # a failed step fails the requests in it, not the server
                for job in {*self._running, *admitted}:
                    job.out.put(exc)
                self._running, lanes = [], self._fresh_lanes()
        stopped = RuntimeError("the batching engine is closed: the server is stopping")
        for job in [*self._running, *self._pending]:
            job.out.put(stopped)

    def _fresh_lanes(self) -> list[Decoder]:
        """Two decoders: rows that stay within the context (cached), and rows that outgrow it (`SLIDES`: their
        windows recomputed every step; beside the others they would make every row recompute its own)."""
        return [Decoder(self.model, []), Decoder(self.model, [])]

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
    def _step(self, lanes: list[Decoder], admitted: list[Job]) -> None:
        """One token for every running row and the first for each admitted one: one forward per lane with rows,
        and one per lane for the rows joining it."""
        self._leave(lanes, [job for job in self._running if job.cancelled])
        logits, order = [], []
        for lane, decoder in enumerate(lanes):
            if decoder.active:
                logits.append(decoder.next_logits())
                order += [(lane, name) for name in decoder.active]
        for lane, decoder in enumerate(lanes):
            joining_jobs = [job for job in admitted if job.lane == lane]
            if not joining_jobs:
                continue
            joining = Decoder(self.model, [p for job in joining_jobs for p in job.prompts])
            logits.append(joining.next_logits())
            names = [(lane, name) for name in decoder.join(joining)]
            order += names
            rows = iter(names)
            for job in joining_jobs:
                job.live = [Row(next(rows), i, RowDraws(job.seed)) for i in range(len(job.prompts))]
        self._running.extend(admitted)
        if not logits:
            return
        chosen = self._choose(order, torch.cat(logits))
        self.forwards += 1
        self.rows_stepped += len(chosen)
        for lane, decoder in enumerate(lanes):
            decoder.push([chosen[(lane, name)] for name in decoder.active])
        ended = []
        for job in self._running:
            job.made += 1
            step = [(row.index, chosen[row.name]) for row in job.live]
            job.tokens += sum(token != job.stop_token for _, token in step)
            job.out.put(step)
            done = [row.name for row in job.live if chosen[row.name] == job.stop_token]
            job.live = [row for row in job.live if row.name not in done]
            _drop(lanes, done)
            if job.made >= job.max_new_tokens or not job.live:
                ended.append(job)
        self._leave(lanes, ended)

    def _choose(self, order: list[tuple[int, int]], logits: torch.Tensor) -> dict[tuple[int, int], int]:
        """Each row's token (by its (lane, name), `order` the logits' rows), chosen with its own request's sampling
        and draws: rows that sample alike chosen together (`choose` is row by row: a row's token does not depend on
        its neighbours)."""
        place = {name: i for i, name in enumerate(order)}
        groups: dict[tuple, list[Row]] = {}
        for job in self._running:
            groups.setdefault((job.temperature, job.top_k), []).extend(job.live)
        chosen = {}
        for (temperature, top_k), rows in groups.items():
            index = torch.tensor([place[row.name] for row in rows])
            tokens = choose(logits[index], temperature, top_k, [row.draws for row in rows])
            chosen.update(zip((row.name for row in rows), tokens, strict=True))
        return chosen

    def _leave(self, lanes: list[Decoder], jobs: list[Job]) -> None:
        """Take `jobs` out of the batch (ended, or their consumer gone) and tell their consumers."""
        for job in jobs:
            _drop(lanes, [row.name for row in job.live])
            job.live = []
            job.out.put(None)
            if self.on_finished is not None:
                self.on_finished(job.tokens)
        self._running = [job for job in self._running if job not in jobs]


def _drop(lanes: list[Decoder], names: list[tuple[int, int]]) -> None:
    """Rows (lane, name) out of their lanes' batches, their tokens forgotten."""
    for lane, decoder in enumerate(lanes):
        mine = [name for at, name in names if at == lane]
        decoder.drop(mine)
        decoder.release(mine)
