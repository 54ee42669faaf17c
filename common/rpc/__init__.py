"""What every pdserve gRPC process shares: server setup, status mapping, addresses."""
