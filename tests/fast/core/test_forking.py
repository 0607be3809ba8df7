"""`frozen_heap`: a child forked within it finds the parent's objects out of its collections' reach; the parent's are
back in reach after it. `default_signals`: a forked worker ends at SIGTERM whatever handler its parent set."""

from __future__ import annotations

import gc
import multiprocessing
import signal

from helpers_forking import exit_code_at_sigterm

from foundry.core.forking import default_signals, frozen_heap


def _frozen_in_child(queue) -> None:
    queue.put(gc.get_freeze_count())


def test_a_child_forked_within_keeps_the_parents_heap_frozen_and_the_parent_thaws():
    before = gc.get_freeze_count()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with frozen_heap():
        assert gc.get_freeze_count() > before
        child = context.Process(target=_frozen_in_child, args=(queue,))
        child.start()
    assert gc.get_freeze_count() == before
    assert queue.get(timeout=30) > 0
    child.join(timeout=30)
    assert child.exitcode == 0


def test_a_worker_with_default_signals_ends_at_sigterm_not_by_its_parents_handler():
    assert exit_code_at_sigterm(lambda: None) == 1  # the parent's handler raised in the child
    assert exit_code_at_sigterm(default_signals) == -signal.SIGTERM
