"""Python client library and load-test CLI."""
