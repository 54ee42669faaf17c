"""Tenants: API key lookup, token buckets and concurrency quotas (a fake clock, no servers)."""

from __future__ import annotations

import pytest

from gateway.tenants import AuthError, QuotaError, TenantTable, TokenBucket


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_refills_at_its_rate():
    clock = FakeClock()
    bucket = TokenBucket(rate_per_s=2.0, burst=3.0, clock=clock)
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    assert bucket.retry_after_s() == pytest.approx(0.5)
    clock.now += 0.5
    assert bucket.try_take() and not bucket.try_take()
    clock.now += 100  # never more than the burst
    assert sum(bucket.try_take() for _ in range(10)) == 3


def _table(clock: FakeClock) -> TenantTable:
    return TenantTable.from_dict({"tenants": {
        "a": {"api_keys": ["key-a"], "requests_per_s": 1, "burst": 2, "max_concurrency": 1},
        "b": {"api_keys": ["key-b1", "key-b2"]},
    }}, clock=clock)


@pytest.mark.parametrize("metadata, words", [
    ((), "missing API key"),
    ((("authorization", "Basic key-a"),), "expected 'Bearer <key>'"),
    ((("authorization", "Bearer "),), "expected 'Bearer <key>'"),
    ((("authorization", "Bearer not-a-key"),), "unknown API key"),
])
def test_authentication_failures_say_why_and_never_echo_the_key(metadata, words):
    with pytest.raises(AuthError) as err:
        _table(FakeClock()).authenticate(metadata)
    assert words in str(err.value) and "not-a-key" not in str(err.value)


def test_each_key_maps_to_its_tenant():
    table = _table(FakeClock())
    assert table.authenticate((("authorization", "Bearer key-a"),)).name == "a"
    assert table.authenticate((("Authorization", b"bearer  key-b2 "),)).name == "b"


def test_concurrency_quota_and_rate_limit_never_charge_a_refused_request():
    clock = FakeClock()
    tenant = _table(clock).tenants["a"]
    first = tenant.admit()
    with pytest.raises(QuotaError, match="1 requests in flight"):
        tenant.admit()  # refused for concurrency: must not spend a token
    first.release()
    first.release()  # idempotent
    assert tenant.in_flight == 0
    with tenant.admit():  # the second token of the burst is still there
        pass
    with pytest.raises(QuotaError, match="rate limit of 1 requests/s; retry in 1.00 s"):
        tenant.admit()  # refused for rate: must not hold a slot
    assert tenant.in_flight == 0
    clock.now += 1.0
    tenant.admit().release()
    assert (tenant.admitted, tenant.rejected_rate, tenant.rejected_concurrency) == (3, 1, 1)


def test_an_open_table_admits_anyone_without_limits():
    table = TenantTable.open()
    tenant = table.authenticate(())
    slots = [tenant.admit() for _ in range(1000)]
    assert tenant.in_flight == 1000 and tenant.name == ""
    for slot in slots:
        slot.release()


@pytest.mark.parametrize("raw, words", [
    ({}, "expected"),
    ({"tenants": {"a": {"api_keys": []}}}, "tenant a: api_keys must be a non-empty list"),
    ({"tenants": {"a": {"api_keys": [""]}}}, "tenant a: api_keys has an empty"),
    ({"tenants": {"a": {"api_keys": ["k"]}, "b": {"api_keys": ["k"]}}}, "tenant b: a key is also listed for tenant a"),
    ({"tenants": {"a": {"api_keys": ["k"], "requests_per_s": -1}}}, "tenant a: requests_per_s must be a number >= 0"),
    ({"tenants": {"a": {"api_keys": ["k"], "max_concurency": 3}}}, "tenant a: unknown field(s) max_concurency"),
    ({"tenants": {"a": {"api_keys": ["k"], "max_concurrency": 1.5}}}, "max_concurrency must be a whole number"),
])
def test_bad_tenant_files_name_the_tenant_and_field(raw, words):
    with pytest.raises(ValueError) as err:
        TenantTable.from_dict(raw)
    assert words in str(err.value)
