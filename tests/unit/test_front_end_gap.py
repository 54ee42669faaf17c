"""tools/front_end_gap.py joins the load tester's per-request TTFTs with the gateway's log by id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.front_end_gap import work_dir_gaps

LOG = """\
2026-11-26 21:57:03,031 pdserve.gateway.requests INFO [aa01] finished: length, 26 tokens, ttft 60.0 ms, tpot 2.61 ms, e2e 130.6 ms, allowed 10.0 ms, SLO met
2026-11-26 21:57:03,040 pdserve.gateway.requests INFO [aa02] finished: length, 26 tokens, ttft 90.0 ms, tpot 2.61 ms, e2e 130.6 ms, allowed 10.0 ms, SLO met
2026-11-26 21:57:03,050 pdserve.gateway.requests INFO [aa03] finished: length, 26 tokens, ttft 250.0 ms, tpot 2.61 ms, e2e 330.6 ms, allowed 5.0 ms, SLO met
2026-11-26 21:57:03,060 pdserve.gateway.requests INFO [aa04] ended with RESOURCE_EXHAUSTED (gateway_busy): busy
"""


def test_the_gap_per_request_and_the_misses_only_the_tester_saw(tmp_path: Path) -> None:
    (tmp_path / "logs-scorpio").mkdir()
    (tmp_path / "logs-scorpio" / "gateway.log").write_text(LOG)
    (tmp_path / "scorpio").mkdir()
    result = {"request_ids": ["aa01", "aa02", "aa03", "", "zz99"], "ttfts": [0.065, 0.120, 0.258, None, 0.05],
              "ttft_slos_ms": [100.0, 100.0, 300.0, 100.0, 100.0], "slo_classes": ["t100", "t100", "t300", "t100", "t100"]}
    (tmp_path / "scorpio" / "32.json").write_text(json.dumps(result))
    (tmp_path / "scorpio" / "8.json").write_text(json.dumps({"ttfts": [0.1]}))  # not detailed: left out
    [point] = work_dir_gaps(tmp_path)
    assert (point["policy"], point["rate"], point["matched"]) == ("scorpio", 32.0, 3)  # ids the log has, with a TTFT
    assert point["gap_ms"]["max"] == pytest.approx(30.0)  # aa02: 120 by the tester, 90 by the gateway
    assert point["gap_ms"]["p50"] == pytest.approx(8.0)  # gaps 5, 30, 8
    assert point["gap_over_allowance"] == 2  # 30 > 10 and 8 > 5; 5 ≤ 10
    assert point["ttft_misses_unseen_by_gateway"] == {"t100": 1}  # aa02 missed 100 ms only by the tester's clock
