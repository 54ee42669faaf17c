"""The wire format: the .proto files (proto package pdserve.v1) and their generated stubs."""
