"""Who is a straggler (`foundry.training.stragglers`): a rank whose forward takes more than 1.5x the others'
median. The two-rank run with one rank held from outside is tests/slow/training/test_train_processes.py."""

from __future__ import annotations

import logging

from foundry.training.stragglers import report, stragglers


def test_a_rank_far_slower_than_the_others_median_is_named():
    assert stragglers([10.0, 10.5, 31.0, 9.8]) == [2]
    assert stragglers([10.0, 14.9]) == []  # under 1.5x: noise, not a straggler
    assert stragglers([10.0, 16.0]) == [1]
    assert stragglers([12.0]) == []  # one rank: nothing to compare


def test_the_report_logs_every_ranks_pace_and_warns_naming_rank_and_host(caplog):
    class Logger:
        def __init__(self):
            self.logged = []

        def log_metrics(self, metrics, step):
            self.logged.append((step, metrics))

    logger = Logger()
    with caplog.at_level(logging.WARNING, "foundry.training.stragglers"):
        report([10.0, 30.0], ["node1", "node2"], 40, [logger])
    assert logger.logged == [(40, {"pace/rank_0_forward_ms": 10.0, "pace/rank_1_forward_ms": 30.0})]
    assert "rank 1 on node2 is a straggler: its forward pass takes 30.0 ms, 3.0x the others' median" in caplog.text
