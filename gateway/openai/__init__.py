"""The OpenAI-compatible HTTP front door: ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``."""
