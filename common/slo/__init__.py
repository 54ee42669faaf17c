"""SLO-aware scheduling: cost models, credit batching and admission (after SCORPIO, arXiv 2505.23022)."""
