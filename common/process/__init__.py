"""Process concerns every server has, whatever its role: health and drain, metrics, logs, shared flags."""
