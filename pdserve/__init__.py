"""pdserve: disaggregated LLM serving. The ``pdserve`` console script lives in :mod:`pdserve.cli`."""

__version__ = "0.1.0"
