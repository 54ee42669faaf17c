"""``pdserve simulate``: the cluster's own policy code on a virtual clock, cost models as workers.

The gateway's decisions (the TTFT guard and its refusals, the routers' orders, the admission
queue's rounds, the closed loop on the promise) and the workers' engines (``EngineCore``: the
scheduler with least-slack-first prefill and credit-batched decode, VBS admission, leases, the
calibration) are the very objects the cluster runs; only the forward and the RPCs are replaced,
by cost models and a latency per hop, and (``simulator.host``, where the host has no core to
spare) the front end's share of the workers' cores by a stretch of their forwards.
"""
