"""``benchmarks/bench_dense_route.py`` on a tiny data set: the methods run, interleaved, and are reported."""

from __future__ import annotations

import json

import pytest

from hiclass_parallel.estimators.networks import _native_path_step


@pytest.mark.skipif(not _native_path_step.available(),
                    reason="the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")
def test_the_routes_run_and_are_written(tmp_path):
    from benchmarks.bench_dense_route import main

    out = tmp_path / "dense.json"
    run = main(["--data", "tab-4", "--methods", "defaults,sparsemlp,sparsemlp-relu", "--repeats", "2", "--param",
                "max_epochs=1", "--out", str(out)])
    rows = run["results"]
    assert [r["method"] for r in rows] == ["defaults", "sparsemlp", "sparsemlp-relu", "sparsemlp-relu", "sparsemlp",
                                           "defaults"]  # order alternates
    by = {r["method"]: r for r in rows}
    # rows not of length 1: the default keeps MLP on torch; SparseMLP asked for trains fused
    assert (by["defaults"]["module"], by["defaults"]["step_engine"]) == ("MLP", "torch")
    assert (by["sparsemlp"]["module"], by["sparsemlp"]["step_engine"]) == ("SparseMLP", "fused")
    # the ReLU hidden layer trains fused too, no batch falling back
    assert (by["sparsemlp-relu"]["module"], by["sparsemlp-relu"]["step_engine"]) == ("SparseMLP", "fused")
    assert by["sparsemlp-relu"]["step_fallbacks"] == 0
    assert all(r["max_epochs"] == 1 and 0 <= r["hf1"] <= 1 and r["fit_s"] > 0 for r in rows)
    main(["--data", "tab-4", "--methods", "defaults", "--param", "max_epochs=1", "--out", str(out)])
    assert len(json.loads(out.read_text())["runs"]) == 2  # a second run is appended
