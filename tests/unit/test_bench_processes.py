"""How many load-tester processes ``--processes auto`` picks (``client.bench.processes``)."""

from __future__ import annotations

import pytest

from client.bench.processes import auto_processes
from client.bench.workload import PlannedRequest


def _plan(rate: float, n: int, output_len: int) -> list[PlannedRequest]:
    return [PlannedRequest(i, [1, 2, 3], output_len, None, i / rate) for i in range(n)]


@pytest.mark.parametrize("rate, output_len, cores, expected", [
    (8, 48, 2, 1),  # a quarter of two cores is none: one process
    (8, 48, 16, 1),  # 384 messages a second: one is plenty
    (192, 48, 16, 4),  # 9,216 a second would want 5; a quarter of 16 cores is 4
    (192, 48, 64, 5),
    (30, 100, 64, 2),  # 3,000 a second: two
])
def test_auto_processes_follow_the_planned_messages_up_to_a_quarter_of_the_cores(rate, output_len, cores, expected):
    assert auto_processes(_plan(rate, 200, output_len), cores) == expected


def test_a_plan_sent_all_at_once_gets_as_many_as_the_cores_allow():
    plan = [PlannedRequest(i, [1], 10, None, 0.0) for i in range(50)]
    assert auto_processes(plan, 16) == 4
    assert auto_processes(plan[:1], 16) == 1
