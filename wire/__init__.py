"""The wire format: the stubs generated from ``protos/`` (proto package pdserve.v1) and SLO helpers."""
