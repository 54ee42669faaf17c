"""The CPU's prepacked linears compute what ``F.linear`` computes, for the rows they take, and
leave every other call to it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from common.model.packed_linear import MAX_ROWS, ROW_GRAIN, PackedLinear, packed_linear_supported, prefill_rows_packed

pytestmark = pytest.mark.skipif(not packed_linear_supported(torch.device("cpu"), torch.float32),
                                reason="this torch build has no oneDNN linear")


@pytest.mark.parametrize("rows", [1, 3, 8, 33, MAX_ROWS])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_rows_match_f_linear(rows, bias):
    gen = torch.Generator().manual_seed(rows)
    w = torch.randn(300, 96, generator=gen)
    b = torch.randn(300, generator=gen) if bias else None
    x = torch.randn(rows, 96, generator=gen)
    linear = PackedLinear([w])
    assert linear.num_packed == 1
    torch.testing.assert_close(linear(x, w, b), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    # a leading batch shape is kept, as F.linear keeps it
    assert linear(x.view(1, rows, 96), w, b).shape == (1, rows, 300)


def test_more_rows_than_a_decode_step_and_unknown_weights_take_f_linear_exactly():
    gen = torch.Generator().manual_seed(0)
    w, other = torch.randn(64, 32, generator=gen), torch.randn(64, 32, generator=gen)
    linear = PackedLinear([w], max_rows=4)
    big = torch.randn(5, 32, generator=gen)
    assert torch.equal(linear(big, w), F.linear(big, w))  # bit for bit: the plain call itself
    small = torch.randn(2, 32, generator=gen)
    assert torch.equal(linear(small, other), F.linear(small, other))
    assert torch.equal(linear(torch.empty(0, 32), w), F.linear(torch.empty(0, 32), w))


@pytest.mark.skipif(not packed_linear_supported(torch.device("cpu"), torch.bfloat16),
                    reason="no oneDNN bfloat16 kernels on this CPU")
@pytest.mark.parametrize("rows", [1, 8, MAX_ROWS, 300])
def test_bfloat16_packed_rows_match_f_linear_to_bfloat16_rounding(rows):
    gen = torch.Generator().manual_seed(rows)
    w = (torch.randn(300, 96, generator=gen) / 10).bfloat16()
    b = torch.randn(300, generator=gen).bfloat16()
    x = torch.randn(rows, 96, generator=gen).bfloat16()
    linear = PackedLinear([w], max_rows=None)  # every size packed, as where prefill measured it faster
    got = linear(x, w, b)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), F.linear(x.float(), w.float(), b.float()), rtol=0.02, atol=0.02)


def test_the_probe_of_many_rows_times_both_layouts_and_answers():
    """It returns a verdict for real weights (which way depends on the CPU), and packed calls of
    prefill size give F.linear's products where it says packed."""
    gen = torch.Generator().manual_seed(3)
    weights = [torch.randn(192, 64, generator=gen), torch.randn(64, 192, generator=gen)]
    assert prefill_rows_packed(weights, rows=128, repeats=1) in (True, False)
    x = torch.randn(128, 64, generator=gen)
    torch.testing.assert_close(PackedLinear(weights, max_rows=None)(x, weights[0]), F.linear(x, weights[0]),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [MAX_ROWS + 1, 100, 3 * ROW_GRAIN, 401])
@pytest.mark.parametrize("max_rows", [None, MAX_ROWS])
def test_prefill_sized_calls_run_on_whole_grains_of_rows_and_return_their_own(rows, max_rows, monkeypatch):
    """What oneDNN is handed has a multiple of ROW_GRAIN rows (a kernel is compiled per shape), and
    the caller gets its own rows' products, packed or plain, whatever the padding held."""
    gen = torch.Generator().manual_seed(rows)
    w, b = torch.randn(80, 48, generator=gen), torch.randn(80, generator=gen)
    x = torch.randn(1, rows, 48, generator=gen)
    linear = PackedLinear([w], max_rows=max_rows)
    seen: list[int] = []
    inner = linear._call
    monkeypatch.setattr(linear, "_call", lambda x_, rows_, w_, b_: seen.append(x_.numel() // x_.shape[-1]) or
                        inner(x_, rows_, w_, b_))
    got = linear(x, w, b)
    assert seen == [-(-rows // ROW_GRAIN) * ROW_GRAIN]
    assert got.shape == (1, rows, 80)
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    seen.clear()
    linear(torch.randn(MAX_ROWS - 3, 48, generator=gen), w, b)  # a decode step's rows: as they are
    assert seen == [MAX_ROWS - 3]
