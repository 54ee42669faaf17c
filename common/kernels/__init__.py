"""Triton kernels: the GPU path of the model's small ops, its KV-cache write and its attention.

Each kernel has a torch twin (``common.model``'s CPU path) and is tested against it on the CPU
under ``TRITON_INTERPRET=1``. Nothing here is imported unless the Triton backend is chosen.
"""
