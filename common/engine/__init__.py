"""The engine: requests, the scheduler, the block pool and leases, LLMEngine and the thread that runs it."""
