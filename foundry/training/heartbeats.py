"""Which rank stopped answering: each rank's heartbeat in the ranks' store, read when a rank's training fails.

A collective that times out (`train.collective_timeout_s`) tells a rank that it waited, not for whom. So every rank
counts a heartbeat in the process group's store every `interval` seconds from a thread of its own: it goes on while
the rank waits inside a collective (torch releases the GIL there) and stops when the process is stopped (SIGSTOP, a
hung node) or dead. A rank whose collective timed out reads every count twice, two intervals apart, and names each
other rank whose count did not move, with its host (`foundry.training.hosts`), in a log line and in a note on the
exception, which its traceback and so the launcher's error carry. Tested with two ranks; with more, a rank that
waits in a collective too must keep beating, which rests on the GIL released there (not tested). Under torchrun the store is its agent's (the c10d rendezvous
store, on the first node), not a rank's, so it answers while a rank is stopped, on this host or across nodes.
"""

from __future__ import annotations

import logging
import re
import threading
import time

from lightning.pytorch import Callback

from foundry.training.hosts import this_host

log = logging.getLogger(__name__)

PREFIX = "foundry/heartbeat"
# What gloo ("Timed out waiting 15000ms ...", "Application timeout caused pair closure") and NCCL ("collective
# operation timeout") say when a collective waited too long. Other failures name their rank already (the agent
# names a killed one) and are not held up by the two intervals the reading takes.
TIMED_OUT = re.compile(r"timed? ?out", re.IGNORECASE)


def interval_s(collective_timeout_s: float) -> float:
    """A beat every tenth of the timeout, between 0.5 and 5 s: the two intervals it takes to tell who is silent
    stay short beside the timeout the failing rank has already waited."""
    return min(5.0, max(0.5, collective_timeout_s / 10))


class Heartbeat:
    """Rank `rank`'s heartbeat in `store` (`start`, `stop`), and who among `world` ranks has none (`silent`)."""

    def __init__(self, store, rank: int, world: int, interval: float):
        self.store, self.rank, self.world, self.interval = store, rank, world, interval
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.store.set(f"{PREFIX}/host/{self.rank}", this_host())
        self._thread = threading.Thread(target=self._beat, name="foundry-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)

    def _beat(self) -> None:
        while not self._stopped.is_set():
            try:
                self.store.add(f"{PREFIX}/count/{self.rank}", 1)
            except Exception:  # the store is gone (its agent ended): nobody will ask any more
                return
            self._stopped.wait(self.interval)

    def _counts(self) -> list[int]:
        return [self.store.add(f"{PREFIX}/count/{rank}", 0) for rank in range(self.world)]

    def host(self, rank: int) -> str:
        key = f"{PREFIX}/host/{rank}"
        return self.store.get(key).decode() if self.store.check([key]) else "?"

    def silent(self) -> list[int]:
        """The other ranks whose heartbeat did not move in two intervals (this rank's own is going)."""
        before = self._counts()
        time.sleep(2 * self.interval)
        after = self._counts()
        return [rank for rank in range(self.world) if rank != self.rank and after[rank] == before[rank]]

    def describe_silent(self) -> str:
        """'rank 1 on node2 stopped answering: ...' for each silent rank; '' when every rank's heartbeat goes on."""
        waited = 2 * self.interval
        return "\n".join(
            f"rank {rank} on {self.host(rank)} stopped answering: its heartbeat did not move in {waited:.0f} s "
            "(its process stopped or hung, or its node lost)"
            for rank in self.silent()
        )


class Heartbeats(Callback):
    """Every rank beats from setup to teardown; a rank whose collective timed out names the silent ranks. One rank:
    nothing to do."""

    def __init__(self, collective_timeout_s: float):
        self.interval = interval_s(collective_timeout_s)
        self.heartbeat: Heartbeat | None = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        import torch.distributed as dist

        if trainer.world_size == 1 or not dist.is_initialized():
            return
        store = dist.distributed_c10d._get_default_store()
        self.heartbeat = Heartbeat(store, trainer.global_rank, trainer.world_size, self.interval)
        self.heartbeat.start()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if self.heartbeat is None or not TIMED_OUT.search(str(exception)):
            return
        try:
            named = self.heartbeat.describe_silent()
        except Exception as exc:  # the store is gone too: the original error is what matters
            log.warning("could not read the ranks' heartbeats: %s", exc)
            return
        finally:
            self.heartbeat.stop()
        if named:
            log.error("%s", named)
            exception.add_note(named)
