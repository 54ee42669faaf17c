"""API keys → tenants, and each tenant's rate limit (token bucket) and concurrency quota.

The table is read once from the ``--api-keys`` JSON file::

    {"tenants": {"team-a": {"api_keys": ["pk-..."], "requests_per_s": 20, "burst": 40,
                            "max_concurrency": 16}}}

``requests_per_s``/``burst`` (0 or absent: no rate limit; burst defaults to max(1, rate)) and
``max_concurrency`` (0 or absent: unlimited) are optional. Everything here runs on the
gateway's event loop thread, so none of it needs a lock.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TENANT_FIELDS = {"api_keys", "requests_per_s", "burst", "max_concurrency"}


class AuthError(Exception):
    """Missing, malformed or unknown credentials (UNAUTHENTICATED)."""


class QuotaError(Exception):
    """A tenant is over its rate limit or concurrency quota (RESOURCE_EXHAUSTED)."""


class TokenBucket:
    """``burst`` tokens at most, refilled at ``rate_per_s``; a request takes one."""

    def __init__(self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.clock = clock
        self.tokens = burst
        self._last = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self._last) * self.rate_per_s)
        self._last = now

    def try_take(self, n: float = 1.0) -> bool:
        self._refill()
        if self.tokens + 1e-9 < n:
            return False
        self.tokens -= n
        return True

    def retry_after_s(self, n: float = 1.0) -> float:
        self._refill()
        return max(0.0, (n - self.tokens) / self.rate_per_s) if self.rate_per_s > 0 else float("inf")


class Admission:
    """A tenant's concurrency slot, held while its request runs; ``release`` is idempotent."""

    def __init__(self, tenant: Tenant) -> None:
        self._tenant: Tenant | None = tenant

    def release(self) -> None:
        if self._tenant is not None:
            self._tenant.in_flight -= 1
            self._tenant = None

    def __enter__(self) -> Admission:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class Tenant:
    name: str  # "" for the anonymous tenant of an open gateway
    requests_per_s: float = 0.0
    burst: float = 0.0
    max_concurrency: int = 0
    clock: Callable[[], float] = time.monotonic
    in_flight: int = 0
    admitted: int = 0
    rejected_rate: int = 0
    rejected_concurrency: int = 0
    bucket: TokenBucket | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.requests_per_s > 0:
            self.bucket = TokenBucket(self.requests_per_s, self.burst or max(1.0, self.requests_per_s), self.clock)

    def admit(self) -> Admission:
        """Takes a concurrency slot and a rate token, or raises ``QuotaError`` having taken
        neither (the concurrency check comes first, so a refused request spends no token)."""
        if self.max_concurrency and self.in_flight >= self.max_concurrency:
            self.rejected_concurrency += 1
            raise QuotaError(f"tenant {self.name} already has {self.in_flight} requests in flight (its limit)")
        if self.bucket is not None and not self.bucket.try_take():
            self.rejected_rate += 1
            raise QuotaError(f"tenant {self.name} is over its rate limit of {self.requests_per_s:g} requests/s; "
                             f"retry in {self.bucket.retry_after_s():.2f} s")
        self.in_flight += 1
        self.admitted += 1
        return Admission(self)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class TenantTable:
    def __init__(self, tenants: dict[str, Tenant], keys: dict[bytes, str], open_access: bool = False) -> None:
        self.tenants = tenants
        self._keys = keys  # sha256(key) -> tenant name: lookups never compare the secret itself
        self.open_access = open_access

    @classmethod
    def open(cls) -> TenantTable:
        """No authentication: every caller is one anonymous tenant without limits."""
        return cls({"": Tenant("")}, {}, open_access=True)

    @classmethod
    def from_file(cls, path: str | Path) -> TenantTable:
        try:
            raw = json.loads(Path(path).read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"--api-keys {path}: not valid JSON ({exc})") from None
        return cls.from_dict(raw, clock=time.monotonic)

    @classmethod
    def from_dict(cls, raw: Any, clock: Callable[[], float] = time.monotonic) -> TenantTable:
        if not isinstance(raw, dict) or not isinstance(raw.get("tenants"), dict) or not raw["tenants"]:
            raise ValueError('api keys: expected {"tenants": {name: {"api_keys": [...], ...}}}')
        tenants: dict[str, Tenant] = {}
        keys: dict[bytes, str] = {}
        for name, spec in raw["tenants"].items():
            if not name or not isinstance(spec, dict):
                raise ValueError(f"api keys: tenant {name!r} must be a non-empty name mapping to an object")
            unknown = set(spec) - TENANT_FIELDS
            if unknown:
                raise ValueError(f"api keys: tenant {name}: unknown field(s) {', '.join(sorted(unknown))}")
            api_keys = spec.get("api_keys")
            if not isinstance(api_keys, list) or not api_keys:
                raise ValueError(f"api keys: tenant {name}: api_keys must be a non-empty list")
            for key in api_keys:
                if not isinstance(key, str) or not key.strip():
                    raise ValueError(f"api keys: tenant {name}: api_keys has an empty or non-string key")
                if _digest(key) in keys:
                    raise ValueError(f"api keys: tenant {name}: a key is also listed for tenant {keys[_digest(key)]}")
                keys[_digest(key)] = name
            numbers = {}
            for fname in ("requests_per_s", "burst", "max_concurrency"):
                value = spec.get(fname, 0)
                if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                    raise ValueError(f"api keys: tenant {name}: {fname} must be a number >= 0, got {value!r}")
                numbers[fname] = value
            if numbers["max_concurrency"] != int(numbers["max_concurrency"]):
                raise ValueError(f"api keys: tenant {name}: max_concurrency must be a whole number")
            tenants[name] = Tenant(name, float(numbers["requests_per_s"]), float(numbers["burst"]),
                                   int(numbers["max_concurrency"]), clock)
        return cls(tenants, keys)

    def authenticate(self, metadata: Sequence[tuple[str, str | bytes]]) -> Tenant:
        """The tenant of the ``authorization: Bearer <key>`` header; ``AuthError`` otherwise.
        Messages never repeat the key."""
        if self.open_access:
            return self.tenants[""]
        values = [v for k, v in metadata if k.lower() == "authorization"]
        if not values:
            raise AuthError("missing API key: send the metadata 'authorization: Bearer <key>'")
        value = values[0].decode() if isinstance(values[0], bytes) else values[0]
        scheme, _, key = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise AuthError("malformed authorization metadata: expected 'Bearer <key>'")
        name = self._keys.get(_digest(key.strip()))
        if name is None:
            raise AuthError("unknown API key")
        return self.tenants[name]
