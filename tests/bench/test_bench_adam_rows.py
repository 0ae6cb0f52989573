"""``benchmarks/bench_adam_rows.py`` on a small table: both forms run and are reported."""

from __future__ import annotations

import pytest

from hiclass_parallel.estimators.networks import _native_path_step


@pytest.mark.skipif(not _native_path_step.available(), reason="the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")
def test_both_second_moments_are_timed_and_sized():
    from benchmarks.bench_adam_rows import parse_args, run

    report = run(parse_args(["--table-rows", "2000", "--width", "16", "--rows", "300", "--steps", "5", "--threads", "1"]))
    entry, row = report["forms"]["entry"], report["forms"]["row"]
    assert entry["median_ms"] > 0 and row["median_ms"] > 0
    assert entry["second_moment_mib"] == pytest.approx(2000 * 16 * 4 / 2**20)
    assert row["second_moment_mib"] == pytest.approx(2000 * 4 / 2**20)
    assert (entry["bytes_per_entry"], row["bytes_per_entry"]) == (28, 20)
    assert report["row_over_entry"] == pytest.approx(row["median_ms"] / entry["median_ms"])
