"""What every pdserve process shares: configs, the model and its forward, the paged KV cache,
sampling, the scheduler and the engine loop."""
