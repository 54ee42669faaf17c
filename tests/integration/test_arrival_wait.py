"""The wait of a gRPC call before its handler, timed by calling the process's own health check:
a real gRPC server on this loop, probed while the loop is held by other work."""

from __future__ import annotations

import asyncio
import time

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from gateway.arrival_wait import ArrivalWait


async def _measure(block_s: float, every_s: float, seconds: float) -> float:
    """The allowance after ``seconds`` of probing a real gRPC server on this loop while the loop
    is held for ``block_s`` out of every ``every_s`` (0: never)."""
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    wait = ArrivalWait()
    probe = asyncio.create_task(wait.run(f"0.0.0.0:{port}", period_s=0.02))

    async def hold_the_loop() -> None:
        while block_s:
            time.sleep(block_s)  # a turn of the loop spent on other work
            await asyncio.sleep(every_s - block_s)

    holder = asyncio.create_task(hold_the_loop())
    await asyncio.sleep(seconds)
    allowance = wait.allowance()
    probe.cancel()
    holder.cancel()
    await server.stop(None)
    return allowance


def test_a_loop_held_by_other_work_makes_calls_wait_and_the_probe_sees_it():
    idle = asyncio.run(_measure(0.0, 0.05, 1.0))
    held = asyncio.run(_measure(0.06, 0.07, 1.0))
    assert idle < 0.03
    assert held >= 0.05, f"calls queued behind 60 ms turns of the loop, the probe found {held * 1000:.1f} ms"
