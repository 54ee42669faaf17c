"""gRPC metadata keys pdserve processes read from one another (torch-free: the gateway reads them)."""

from __future__ import annotations

# trailing metadata of a failed Prefill: the decode worker a KV transfer failed with, so that
# the gateway retries on another decode worker instead of giving up the prefill worker
FAILED_PEER_KEY = "pdserve-failed-peer"
