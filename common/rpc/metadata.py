"""gRPC metadata keys pdserve processes read from one another (torch-free: the gateway reads them)."""

from __future__ import annotations

# trailing metadata of a failed Prefill: the decode worker a KV transfer failed with, so that
# the gateway retries on another decode worker instead of giving up the prefill worker
FAILED_PEER_KEY = "pdserve-failed-peer"

# trailing metadata of a refused Reserve: "margin" (RESOURCE_EXHAUSTED) when the request's class's ε
# alone refused it (probed lower it would have been admitted), so the gateway relaxes that ε;
# "floor" (FAILED_PRECONDITION) when its TPOT SLO is below one request's step alone there; "kv"
# (RESOURCE_EXHAUSTED) when its pool lacks the blocks, which come back as requests end
REFUSED_BY = "pdserve-refused-by"
