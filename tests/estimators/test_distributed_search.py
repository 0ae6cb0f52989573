"""Distributed hyper-parameter search on dask: same best parameters as n_jobs=1.

The test starts a local dask cluster of 2 worker processes (1 thread each, ``OMP_NUM_THREADS=1``
in their environment) and stops it; the package itself never imports dask or ray.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("distributed", reason="dask search needs dask and distributed (the 'distributed' extra)")

import joblib
from sklearn.model_selection import GridSearchCV

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier

pytestmark = pytest.mark.scale_out

GRID = {"lr": [1e-3, 1e-2], "module__hidden_units": [8, 32]}  # 4 candidates


def search() -> GridSearchCV:
    clf = HierarchicalClassifier(max_epochs=3, batch_size=64, random_state=0)
    return GridSearchCV(clf, GRID, cv=2, n_jobs=-1)


def test_grid_search_on_a_local_dask_cluster_matches_n_jobs_1():
    from distributed import Client, LocalCluster

    X, y, tree = make_hierarchical_classification(n_samples=300, n_features=8, branching=3, depth=2,
                                                  random_state=0)
    reference = search().set_params(n_jobs=1, estimator__tree=tree).fit(X, y)
    env = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "MKL_NUM_THREADS": "1"}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      env=env) as cluster, Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        threads = client.run(lambda: __import__("os").environ.get("OMP_NUM_THREADS"))
        assert set(threads.values()) == {"1"}
        with joblib.parallel_backend("dask"):
            distributed = search().set_params(estimator__tree=tree).fit(X, y)
    assert distributed.best_params_ == reference.best_params_
    np.testing.assert_allclose(distributed.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"])
    np.testing.assert_array_equal(distributed.predict(X), reference.predict(X))


def test_the_package_imports_neither_dask_nor_ray():
    import subprocess
    import sys

    code = ("import sys, hiclass_parallel, hiclass_parallel.estimators as e, hiclass_parallel.metrics; "
            "e.HierarchicalClassifier, e.save_classifier, e.export_program; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'ray')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=300).stdout
    assert out.strip() == "[]"
