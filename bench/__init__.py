"""Benchmarks. Each script prints progress on stderr and one JSON object as its last stdout line."""
