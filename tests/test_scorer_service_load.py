"""benchmarks/scorer_service_load.py for about 10 seconds: 8 clients, hostile requests mixed in;
every good request is scored as locally, every bad one gets its 4xx, and the service stays up."""

from __future__ import annotations

import pytest
from conftest import load_benchmark


@pytest.mark.slow
def test_the_scorer_service_under_load_with_bad_requests_mixed_in():
    bench = load_benchmark("scorer_service_load")
    result = bench.run_load(seconds=10, clients=8)
    assert result["checks"] == {check: True for check in result["checks"]}, result
    assert result["good"]["count"] > 8 and result["good"]["p99_ms"] is not None
    assert all(seen["sent"] >= 1 for seen in result["bad"].values()), result["bad"]
