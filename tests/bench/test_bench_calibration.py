"""The calibration benchmark's plumbing on a tiny subset: both confidences scored on the same
answers, the second configuration fitted beside. Timings are never asserted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import bench_calibration


def test_reliability_bins_and_errors():
    conf = np.array([0.95, 0.95, 0.55, 0.55, 0.15])
    right = np.array([True, False, True, True, False])
    r = bench_calibration.reliability(conf, right, n_bins=10)
    # bins: 0.95 (acc 0.5, gap 0.45, 2 rows), 0.55 (acc 1, gap 0.45, 2 rows), 0.15 (acc 0, gap 0.15)
    assert abs(r["ece"] - (0.45 * 2 + 0.45 * 2 + 0.15) / 5) < 1e-12
    assert abs(r["mce"] - 0.45) < 1e-12
    assert [b["count"] for b in r["bins"]] == [1, 2, 2]


def test_end_to_end_on_a_small_subtree(tmp_path):
    out = tmp_path / "cal.json"
    bench_calibration.main(["--subsets", "dog", "--params", json.dumps({"calibration": "beta", "calibration_size": 0.2}),
                            "--compare", json.dumps({"calibration": None}), "--out", str(out)])
    (r,) = json.loads(out.read_text())
    assert r["calibrator"]["kind"] == "beta" and r["calibrator"]["n_rows"] >= 20
    assert r["raw"]["accuracy"] == r["calibrated"]["accuracy"] == r["exact"]  # the same answers, two confidences
    assert r["raw"]["mean_confidence"] != r["calibrated"]["mean_confidence"]
    assert r["compare"]["params"] == {"calibration": None} and 0 < r["compare"]["hf1"] <= 1
