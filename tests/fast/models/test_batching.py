"""Requests generated together by the batching engine (`models.batching`): each request's tokens are those it gets
alone (greedy, seeded sampling, top-k, stop tokens, several rows, contexts past block_size), whether it started with
others or joined a batch already running; a consumer that stops listening leaves the batch. Tiny random models."""

from __future__ import annotations

import threading

import pytest
import torch
from test_generate_cache import PROMPTS, lively

from models.batching import BatchingEngine
from models.generate import BATCHING, generate_ids

# (temperature, top_k, seed, stop token): greedy, sampled, top-k; rows stopping at different steps
KINDS = [(1.0, 1, 0, None), (0.9, None, 5, 7), (1.3, 8, 2, 3), (1.0, 1, 4, 11)]


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def batched(model, max_rows: int) -> BatchingEngine:
    engine = BatchingEngine(model, max_rows=max_rows, window_s=0.002)
    setattr(model, BATCHING, engine)
    return engine


@pytest.mark.parametrize(("positions", "block"), [("learned", 32), ("rotary+bigram", 32), ("rotary+values", 8)])
def test_concurrent_requests_each_get_what_they_get_alone(positions, block):
    """More requests than rows fit (queued, then joining the running batch as rows leave), of mixed lengths and
    sampling; block 8: rows past the context, the window sliding."""
    model = lively(positions, block=block)
    cases = [([p], 4 + 3 * (i % 4), *KINDS[i % len(KINDS)]) for i, p in enumerate(PROMPTS * 3)]
    cases.append((PROMPTS, 12, *KINDS[0]))  # a request of several rows
    expected = [generate_ids(model, *case) for case in cases]
    engine = batched(model, max_rows=6)
    got = [None] * len(cases)

    def run(i):
        got[i] = generate_ids(model, *cases[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    engine.close()
    assert got == expected
    assert engine.rows_stepped > 2 * engine.forwards  # they were batched: 2 rows or more per forward on average


def test_a_request_joins_a_running_batch_and_a_closed_one_leaves_it():
    model = lively("rotary", block=16)
    long_alone = generate_ids(model, [[1, 2, 3]], 40, 1.0, 1, 0, None)[0]
    short_alone = generate_ids(model, [[9, 8, 7, 6, 5]], 6, 0.9, None, 3, None)[0]
    engine = batched(model, max_rows=4)
    long_steps = engine.steps([[1, 2, 3]], 10_000, 1.0, 1, 0, None)
    long_tokens = [next(long_steps)[0][1] for _ in range(3)]
    short = [step[0][1] for step in engine.steps([[9, 8, 7, 6, 5]], 6, 0.9, None, 3, None)]
    assert short == short_alone
    assert engine.rows_stepped > engine.forwards  # the short request ran in the same steps as the long one
    long_tokens += [next(long_steps)[0][1] for _ in range(37)]
    assert long_tokens == long_alone  # its steps past the context too (block 16): windows
    long_steps.close()
    for _ in range(200):  # the next step drops it
        if engine.running_rows == 0:
            break
        threading.Event().wait(0.01)
    assert engine.running_rows == 0
    engine.close()


def test_a_request_past_its_deadline_in_the_queue_ends_with_time_limit():
    """One row fits; a long request holds it. A second request with a deadline 0.3 s away waits in the queue: it
    ends with `TimeLimit` at its deadline (the server's `max_request_s`), not when the first request is done."""
    import time

    from models.generate import generated_steps
    from models.request_limits import TimeLimit

    model = lively("rotary", block=16)
    engine = batched(model, max_rows=1)
    holding = generated_steps(model, [[1, 2, 3]], 100_000, 1.0, 1, 0, None)
    next(holding)  # the long request runs
    start = time.monotonic()
    with pytest.raises(TimeLimit):
        list(generated_steps(model, [[4, 5]], 8, 1.0, 1, 0, None, deadline=start + 0.3))
    assert time.monotonic() - start < 2.0
    holding.close()
    engine.close()
