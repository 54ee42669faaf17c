"""pdserve.v1 stubs, generated from protos/wire/v1/: gateway.proto (the public API), worker.proto (internal services)."""
