"""The public gRPC server: admission, routing, worker registry, detokenization."""
