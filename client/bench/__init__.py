"""``pdserve bench``: a load tester speaking the language of ``vllm bench serve``."""
