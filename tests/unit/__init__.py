"""Unit tests: no process, no server (gRPC, HTTP or socket), no subprocess, and no wait on the wall
clock (a fake clock where time matters, ``tests.virtual_clock`` for code timed by its event loop;
``await asyncio.sleep(0)`` only to yield). A test that needs any of those is in tests/integration."""
