"""The decode worker: continuous batching over KV blocks received from prefill workers."""
