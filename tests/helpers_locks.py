"""The promotion lock held by one thread while another waits for it."""

from __future__ import annotations

import threading
import time


def holds_then_waits(first_home, second_home, name: str) -> list[str]:
    """Thread A takes the lock and holds it 2 s; thread B, started meanwhile, must get it only after."""
    from tasks.locks import promotion_lock

    order, taken = [], threading.Event()

    def first():
        with promotion_lock(name, first_home):
            taken.set()
            order.append("A in")
            time.sleep(2)
            order.append("A out")

    def second():
        taken.wait()
        with promotion_lock(name, second_home):
            order.append("B in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return order
