"""pdserve.v1: gateway.proto (the public API), worker.proto (internal services)."""
