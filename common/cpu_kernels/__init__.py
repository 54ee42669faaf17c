"""C++ kernels for the CPU path, compiled once per machine on first use (``build.load``).

The torch path (``common.model.attention``) stays the reference every kernel here is tested
against, and the fallback where no C++ compiler is available.
"""
