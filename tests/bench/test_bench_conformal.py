"""The conformal benchmark's plumbing: its answer summary and its table, on a toy tree, and
the whole run on the dog subtree (no figures asserted)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import bench_conformal  # noqa: E402
from hiclass_parallel import Tree  # noqa: E402


def test_describe_and_table():
    tree = Tree.from_dict({"dog": {"small dog": None, "big dog": None}, "cat": None})
    truth = tree.to_ids(["small dog", "cat"])
    answers = np.array([tree.to_ids(["dog"])[0], -1])
    d = bench_conformal.describe(answers, truth, tree)
    assert d["coverage"] == 1.0 and d["mean_depth"] == 0.5 and d["tree_distance_risk"] == 0.0
    row = {"conformal": d, "conformal-distance": d, "threshold": d}
    text = bench_conformal.table([{"root": None, "most-probable": d, "alphas": {"0.1": row}}])
    assert "| all nouns | 0.1 | 1.000 / 0.50 |" in text


def test_end_to_end_on_a_small_subtree(tmp_path):
    out = tmp_path / "conformal.json"
    bench_conformal.main(["--subsets", "dog", "--no-prevectorized", "--out", str(out)])
    report = json.loads(out.read_text())
    (r,) = report["results"]
    assert set(r["alphas"]) == {"0.05", "0.1", "0.2"} and "load average" in report["uptime_at_start"]
    for row in r["alphas"].values():
        assert set(row) == {"conformal", "conformal-distance", "threshold"}
        assert 0 <= row["conformal"]["coverage"] <= 1


def test_timing_on_a_small_subtree(tmp_path):
    out = tmp_path / "timing.json"
    bench_conformal.main(["--timing", "--subsets", "dog", "--rows", "30", "--repeats", "1", "--out", str(out)])
    (r,) = json.loads(out.read_text())["results"]
    assert set(r["median_s"]) == {"predict", "predict_node", "full_sums"} and r["rows"] == 30
    assert r["same_answers"] == 30  # the route along the path and the full sums agree
