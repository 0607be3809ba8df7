"""foundry.core.process_pool: map steps on worker processes of this machine, one core each, results in order."""

from __future__ import annotations

import os

import pytest

from foundry.core.process_pool import ONE_CORE, cores, process_map, serial_map, worker_count


def environment_and_pid(names: tuple[str, ...]) -> tuple[dict, int]:
    return {name: os.environ.get(name) for name in names}, os.getpid()


def test_two_processes_return_the_results_in_the_jobs_order():
    with process_map(2) as mapper:
        assert mapper(abs, [-5, 4, -3, 2, -1, 0]) == [5, 4, 3, 2, 1, 0]


def test_the_workers_are_other_processes_with_one_core_each_and_this_process_keeps_its_environment():
    names = tuple(ONE_CORE)
    before = {name: os.environ.get(name) for name in names}
    with process_map(2) as mapper:
        seen = mapper(environment_and_pid, [names] * 8)
    assert all(environment == ONE_CORE for environment, _ in seen)
    pids = {pid for _, pid in seen}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert {name: os.environ.get(name) for name in names} == before
    for pid in pids:  # stopped when the block ends
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_failing_step_raises_its_own_error_here():
    with pytest.raises(ValueError, match="invalid literal for int"), process_map(2) as mapper:
        mapper(int, ["1", "two", "3"])


def test_one_worker_is_this_process():
    with process_map(1) as mapper:
        assert mapper is serial_map
        assert mapper(environment_and_pid, [()]) == [({}, os.getpid())]


def test_zero_workers_means_one_a_core_this_process_may_use():
    assert worker_count(0) == cores() == len(os.sched_getaffinity(0))
    assert worker_count(3) == 3


@pytest.mark.parametrize("workers", [1, 2])
def test_each_result_is_handed_over_here_in_the_jobs_order(workers):
    seen = []
    with process_map(workers) as mapper:
        assert mapper(abs, [-3, 2, -1], lambda job, result: seen.append((job, result))) == [3, 2, 1]
    assert seen == [(-3, 3), (2, 2), (-1, 1)]
