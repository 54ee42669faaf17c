"""The model: Llama-family forward, weights, attention (torch and Triton), paged KV cache, sampler, runner."""
