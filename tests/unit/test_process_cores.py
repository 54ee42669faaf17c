"""What the benchmarks read of a process's threads from ``/proc``: a busy thread's CPU shows as its
own, apart from the process's other threads."""

from __future__ import annotations

import os
import threading
import time

from bench.lib.process_cores import busiest_thread, thread_cpu_seconds


def test_the_busiest_thread_is_the_one_that_spun():
    before = thread_cpu_seconds(os.getpid())
    assert before  # this process has at least its main thread
    reading: dict[int, float] = {}

    def spin_then_read() -> None:  # read while alive: an ended thread leaves /proc
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        reading.update(thread_cpu_seconds(os.getpid()))

    spinner = threading.Thread(target=spin_then_read)
    spinner.start()
    spinner.join()
    assert busiest_thread(before, reading) >= 0.2  # ~0.3 s on its own clock, read in clock ticks
    assert busiest_thread({1: 1.0, 2: 5.0}, {1: 1.5, 2: 5.2, 3: 0.1}) == 0.5
    assert busiest_thread({}, {}) == 0.0
