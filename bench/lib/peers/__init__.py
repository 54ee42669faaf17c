"""Peers: the systems pdserve is measured against, each run in a virtual environment of its own.

The scripts here run under the peer's own Python (``--peer-python``), so they import nothing of
pdserve: they take plain arguments and print one JSON line.
"""
