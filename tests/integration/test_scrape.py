"""Reading a process's metrics endpoint back, as the benchmarks and cluster tests do."""

from __future__ import annotations

from common.process.metrics import Metrics
from common.process.scrape import scrape_metrics
from pdserve.ports import free_port


def test_every_sample_is_read_back_by_its_name_with_labels():
    metrics = Metrics("gateway")
    port = free_port()
    metrics.serve(port, host="127.0.0.1")
    try:
        for _ in range(3):
            metrics.rejected("ttft_unattainable")
        metrics.rejected("queue_full")
        samples = scrape_metrics(port)
    finally:
        metrics.close()
    assert samples['pdserve:request_rejections_total{reason="ttft_unattainable",role="gateway"}'] == 3.0
    assert samples['pdserve:request_rejections_total{reason="queue_full",role="gateway"}'] == 1.0
    assert not any(name.startswith("#") for name in samples)
