"""benchmarks/bench_plan_ahead.py on a tiny split: both settings fitted, alternated, reported."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from support import sparse_rows

from hiclass_parallel.estimators.networks import _native_path_step as native

pytestmark = pytest.mark.skipif(not native.available(), reason="the fused step's C kernel was not built")


def test_bench_plan_ahead_fits_both_settings_and_reports_them(tmp_path, monkeypatch):
    from benchmarks import bench_plan_ahead

    rng = np.random.default_rng(0)
    parents = np.r_[-1, -1, rng.integers(0, 2, 10), rng.integers(2, 12, 30)]
    folder = tmp_path / "tiny"
    folder.mkdir()
    X = sparse_rows(700, 20, density=0.2, seed=0)
    y = rng.integers(0, len(parents), 700)
    for part, value in (("parents", parents), ("y_train", y[:600]), ("y_test", y[600:])):
        np.save(folder / f"{part}.npy", value)
    sp.save_npz(folder / "X_train.sparse.npz", X[:600])
    sp.save_npz(folder / "X_test.sparse.npz", X[600:])
    monkeypatch.setenv("HICLASS_PARALLEL_PLAN_AHEAD", "0")  # the benchmark sets it per fit; put back after
    out = tmp_path / "report.json"
    bench_plan_ahead.main(["--work", str(tmp_path), "--subsets", "tiny", "--rounds", "1", "--threads", "1",
                           "--out", str(out)])
    report = json.loads(out.read_text())["subsets"]["tiny"]
    assert sorted(f["plan_ahead"] for f in report["fits"]) == [False, True]
    assert all(f["fit_s"] > 0 and f["prepare_s"] > 0 and f["steps"] > 0 for f in report["fits"])
    assert {"median_fit_on_s", "median_fit_off_s", "median_step_on_ms", "median_step_off_ms"} <= set(report)
