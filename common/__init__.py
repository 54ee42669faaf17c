"""What the gateway and the workers share, one package per idea:

- ``engine``: requests, the scheduler, block pool and leases, ``LLMEngine`` and its thread;
- ``model``: the Llama-family forward, weights, attention, the paged KV cache, sampler, runner;
- ``text``: tokenizers and incremental detokenization;
- ``slo``: cost models and the SLO guards (plain code of time and state);
- ``kv_transfer``: moving KV blocks between workers, one sender and receiver per transport;
- ``worker``: what a worker process is built from (flags, registration, heartbeats, cores);
- ``process``: what every server process has (health and drain, metrics, logs);
- ``rpc``: gRPC servers, channels, TLS and proto conversions.

The gateway reaches only modules that import no torch (``tests/integration/test_gateway_is_torch_free.py``).
"""
