"""The plan that divides a host's cores among the gateway and the workers of a local cluster."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from common.worker.cpu_plan import format_cores, gateway_shares_cores, parse_cores, plan_cores
from common.worker.config import WorkerConfig


def _workers(n: int) -> list[str]:
    return [f"{'prefill' if i % 2 == 0 else 'decode'}-{i}" for i in range(n)]


@pytest.mark.parametrize("cores, workers", list(itertools.product([1, 2, 3, 4, 7, 16, 64], [1, 2, 3, 4, 8])))
def test_workers_never_share_a_core_or_run_more_threads_than_cores_when_there_are_enough(cores, workers):
    plan = plan_cores(_workers(workers), tuple(range(cores)))
    gateway, assigned = plan[0], plan[1:]
    assert [a.name for a in assigned] == _workers(workers)
    used = [c for a in assigned for c in a.cores]
    assert all(a.threads == len(a.cores) >= 1 for a in assigned)
    if cores >= workers:
        assert len(used) == len(set(used)), "two workers share a core"
        assert sum(a.threads for a in assigned) <= cores
        sizes = [len(a.cores) for a in assigned]
        assert max(sizes) - min(sizes) <= 1  # as even as the cores allow
    else:  # fewer cores than workers: one thread each, spread over every core
        assert set(used) == set(range(cores)) and all(a.threads == 1 for a in assigned)
    if cores > workers:
        assert gateway.cores and not set(gateway.cores) & set(used), "the gateway should be off the workers' cores"
        assert len(used) + len(gateway.cores) == cores
    else:
        assert gateway.cores == ()
    assert all(a.nice == 0 for a in plan)  # every process at the launcher's priority unless told


def test_two_workers_on_two_cores_get_one_core_and_one_thread_each():
    gateway, prefill, decode = plan_cores(["prefill-0", "decode-0"], (0, 1))
    assert (prefill.cores, prefill.threads, decode.cores, decode.threads) == ((0,), 1, (1,), 1)
    assert gateway.describe() == "gateway: any core"
    assert prefill.describe() == "prefill-0: cores 0, 1 thread"


def test_threads_can_be_set_apart_from_the_cores():
    plan = plan_cores(["prefill-0", "decode-0"], tuple(range(9)), threads=2)
    assert [a.threads for a in plan[1:]] == [2, 2] and [len(a.cores) for a in plan[1:]] == [4, 4]


def test_core_lists_parse_and_print_as_ranges():
    assert parse_cores("0-3, 6,8-9") == (0, 1, 2, 3, 6, 8, 9)
    assert format_cores((0, 1, 2, 3, 6, 8, 9)) == "0-3,6,8-9"
    for bad in ("", "a", "3-1", "-2"):
        with pytest.raises(ValueError, match="cpu cores"):
            parse_cores(bad)


def test_a_worker_started_alone_takes_its_share_of_the_plan_or_the_cores_given():
    from common.worker.cpu_plan import available_cores

    mine = available_cores()
    second = WorkerConfig(cpu_share="1/2").core_assignment("decode-0")
    planned = plan_cores(["a", "b"], mine)[2]  # what `pdserve up` gives the second of two workers
    assert (second.name, second.cores, second.threads) == ("decode-0", planned.cores, planned.threads)
    given = WorkerConfig(cpu_cores="0", threads=3).core_assignment("w")
    assert (given.cores, given.threads) == ((0,), 3)
    alone = WorkerConfig().core_assignment("w")
    assert (alone.cores, alone.threads) == ((), len(mine))  # not pinned; one thread per core it may use
    for bad in ({"cpu_share": "2/2"}, {"cpu_share": "x"}, {"cpu_cores": "0", "cpu_share": "0/2"}, {"threads": -1}):
        with pytest.raises(ValueError):
            WorkerConfig(**bad)  # type: ignore[arg-type]


def test_the_gateways_priority_can_be_set_for_a_cluster_and_only_to_what_a_user_may_set(tmp_path):
    from pdserve.cli import build_parser
    from pdserve.cluster import ClusterSpec, LocalCluster

    planned = plan_cores(["prefill-0-t", "decode-0-t"])[0]
    assert LocalCluster(ClusterSpec(), tmp_path)._plan(["prefill-0-t", "decode-0-t"], [])["gateway"] == planned
    niced = LocalCluster(ClusterSpec(gateway_nice=7), tmp_path)._plan(["prefill-0-t", "decode-0-t"], [])["gateway"]
    assert (niced.nice, niced.cores) == (7, planned.cores) and niced.describe().endswith(", nice 7")
    parser = build_parser()
    assert parser.parse_args(["up"]).gateway_nice == 0
    assert parser.parse_args(["up", "--gateway-nice", "5"]).gateway_nice == 5
    for bad in ("-1", "20", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["up", "--gateway-nice", bad])


def test_a_gateway_placed_with_the_decode_workers_gets_the_cores_only_decode_workers_use(tmp_path):
    from pdserve.cli import build_parser
    from pdserve.cluster import ClusterSpec, LocalCluster

    def gateway(workers: list[str], cores: int) -> tuple[int, ...]:
        return plan_cores(workers, tuple(range(cores)), gateway_cores="decode")[0].cores

    assert gateway(["prefill-0", "decode-0"], 2) == (1,)
    assert gateway(["prefill-0", "decode-0", "decode-1"], 2) == (1,)  # decode-1 shares core 0 with prefill-0
    assert gateway(["prefill-0", "decode-0"], 1) == ()  # no core is the decode worker's alone: anywhere
    assert gateway(["prefill-0", "prefill-1", "decode-0", "decode-1"], 2) == ()
    for cores in (3, 16):  # a core of its own wins over any placement
        assert gateway(["prefill-0", "decode-0"], cores) == plan_cores(["prefill-0", "decode-0"], tuple(range(cores)))[0].cores
    with pytest.raises(ValueError, match="gateway cores"):
        plan_cores(["prefill-0", "decode-0"], (0, 1), gateway_cores="prefill")
    placed = LocalCluster(ClusterSpec(gateway_cores="decode"), tmp_path)._plan(["prefill-0-t", "decode-0-t"], [])
    assert placed["gateway"].cores == plan_cores(["prefill-0-t", "decode-0-t"], gateway_cores="decode")[0].cores
    parser = build_parser()
    assert parser.parse_args(["up"]).gateway_cores == "any"
    assert parser.parse_args(["up", "--gateway-cores", "decode"]).gateway_cores == "decode"
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--gateway-cores", "prefill"])


@pytest.mark.parametrize("cores, prefill, decode", [(16, 1, 1), (16, 2, 2), (64, 4, 4), (8, 1, 1)])
def test_gpu_workers_get_two_cores_each_and_the_gateway_the_rest(cores, prefill, decode):
    workers = [f"prefill-{i}" for i in range(prefill)] + [f"decode-{i}" for i in range(decode)]
    gateway, *assigned = plan_cores(workers, tuple(range(cores)), on_device=workers)
    assert [a.name for a in assigned] == workers
    assert all(len(a.cores) == a.threads == 2 for a in assigned)
    used = [c for a in assigned for c in a.cores]
    assert len(used) == len(set(used)) and not set(gateway.cores) & set(used)
    assert sorted(used + list(gateway.cores)) == list(range(cores)), "every core is someone's"


def test_gpu_and_cpu_workers_together_leave_the_gateway_one_core():
    gateway, prefill, decode = plan_cores(["prefill-0", "decode-0"], tuple(range(8)), on_device=["decode-0"])
    assert decode.cores == (6, 7) and gateway.cores == (0,) and prefill.cores == (1, 2, 3, 4, 5)


def test_gpu_workers_on_too_few_cores_are_planned_as_cpu_workers_are():
    workers = ["prefill-0", "decode-0", "prefill-1", "decode-1"]
    assert plan_cores(workers, tuple(range(4)), on_device=workers) == plan_cores(workers, tuple(range(4)))


@pytest.mark.parametrize("cores, places, on_device, shares", [
    (2, "any", False, True),      # two workers pinned to both cores, the gateway wherever the OS puts it
    (2, "decode", False, True),   # on the decode worker's core
    (3, "any", False, False),     # a core of its own
    (16, "any", True, False),     # GPU workers: twelve of its own
])
def test_whether_the_gateway_shares_the_workers_cores(cores, places, on_device, shares):
    workers = ["prefill-0", "decode-0"]
    plan = plan_cores(workers, tuple(range(cores)), gateway_cores=places, on_device=workers if on_device else [])
    assert gateway_shares_cores(plan) is shares
    gateway, *rest = plan
    assert gateway_shares_cores([gateway, *(replace(w, cores=()) for w in rest)])  # beside unpinned workers


@pytest.mark.parametrize("cores, gateway_args, held", [
    ((0, 1), (), True), ((0, 1, 2), (), False),
    ((0, 1), ("--stream-interval-ms", "0"), False), ((0, 1), ("--stream-interval-ms=auto",), False)])
def test_a_cluster_holds_token_messages_where_the_gateway_has_no_core_of_its_own(tmp_path, cores, gateway_args, held):
    from gateway.stream_interval import SHARED_CORES_S
    from pdserve.cluster import ClusterSpec, LocalCluster

    cluster = LocalCluster(ClusterSpec(cpu_cores=cores, gateway_args=gateway_args), tmp_path)
    cluster.plan = cluster._plan(["prefill-0-t", "decode-0-t"], [])
    expected = ["--stream-interval-ms", f"{SHARED_CORES_S * 1000:g}"] if held else []
    assert cluster._stream_interval_args() == expected
