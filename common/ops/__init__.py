"""What every server process does for the people who run it: health, metrics, logs, drain, TLS."""
