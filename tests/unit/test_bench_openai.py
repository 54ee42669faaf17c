"""The load tester's HTTP side: the request bodies it sends (against a raw asyncio server that
writes bytes the way real servers do: tests/integration/test_bench_openai.py)."""

from __future__ import annotations

from client.bench.openai_runner import OpenAITarget, request_body
from client.bench.workload import PlannedRequest


def test_a_completion_body_carries_the_token_ids_and_no_extension_unless_asked():
    item = PlannedRequest(0, [9, 8, 7], 16, None, 0.0)
    body = request_body(OpenAITarget("http://x", "openai", "m"), item, ignore_eos=False)
    assert body["prompt"] == [9, 8, 7] and body["max_tokens"] == 16 and "ignore_eos" not in body
