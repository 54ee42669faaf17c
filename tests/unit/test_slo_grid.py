"""bench/slo.py looks for fcfs's knee past the end of its grid, by the grid's last step."""

from __future__ import annotations

from bench.slo import GRID_EXTENSION, extended_grid


def test_the_grid_goes_on_by_its_last_step():
    assert extended_grid([64.0, 128.0, 192.0, 256.0]) == [64.0, 128.0, 192.0, 256.0, 320.0, 384.0, 448.0, 512.0]
    assert extended_grid([4.0, 8.0, 12.0, 16.0, 24.0, 32.0], more=2) == [4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 40.0, 48.0]
    assert extended_grid([10.0]) == [10.0 * k for k in range(1, GRID_EXTENSION + 2)]
