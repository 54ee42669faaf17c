"""The prefill worker: computes prompts and hands their KV blocks to a decode worker."""
