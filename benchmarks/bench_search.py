"""Hyper-parameter search wall time: ``n_jobs=1`` vs joblib's loky (2 processes) vs dask (2 workers).

``GridSearchCV(HierarchicalClassifier)`` over 4 candidates x 2 folds (``lr`` x
``module__hidden_units``) on synthetic data (``--samples`` rows, 3 levels of branching 4, 64
features), ``--epochs`` epochs per fit. The dask run starts a ``LocalCluster`` of 2 worker
processes with 1 thread each and ``OMP_NUM_THREADS=1`` in their environment; cluster start-up
is timed separately. Every run must find the same best parameters as ``n_jobs=1``.

Run::

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE python -m benchmarks.bench_search
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args(argv)

    import joblib
    from distributed import Client, LocalCluster
    from sklearn.model_selection import GridSearchCV

    from hiclass_parallel.datasets import make_hierarchical_classification
    from hiclass_parallel.estimators import HierarchicalClassifier

    X, y, tree = make_hierarchical_classification(n_samples=args.samples, n_features=64, branching=4, depth=3,
                                                  random_state=0)
    grid = {"lr": [1e-3, 1e-2], "module__hidden_units": [64, 256]}

    def search(n_jobs):
        clf = HierarchicalClassifier(tree, max_epochs=args.epochs, random_state=0)
        return GridSearchCV(clf, grid, cv=2, n_jobs=n_jobs)

    rows = []
    t = time.perf_counter()
    reference = search(1).fit(X, y)
    rows.append(("n_jobs=1", time.perf_counter() - t, reference.best_params_))
    t = time.perf_counter()
    with joblib.parallel_backend("loky", inner_max_num_threads=1):
        loky = search(2).fit(X, y)
    rows.append(("loky, n_jobs=2", time.perf_counter() - t, loky.best_params_))
    env = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE", "MKL_NUM_THREADS": "1"}
    t = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, env=env) as cluster, \
            Client(cluster):
        start = time.perf_counter() - t
        t = time.perf_counter()
        with joblib.parallel_backend("dask"):
            dask = search(-1).fit(X, y)
        rows.append(("dask, 2 workers x 1 thread", time.perf_counter() - t, dask.best_params_))
    print(f"{args.samples} samples, {tree.n_classes} classes, 4 candidates x 2 folds, {args.epochs} epochs; "
          f"load average {os.getloadavg()[0]:.2f}; dask cluster start-up {start:.1f} s (not counted below)")
    print("| run | wall s | vs n_jobs=1 | best params |\n| --- | ---: | ---: | --- |")
    for name, seconds, best in rows:
        assert best == reference.best_params_, f"{name} found {best}, n_jobs=1 {reference.best_params_}"
        print(f"| {name} | {seconds:.1f} | {seconds / rows[0][1]:.2f}x | {best} |")


if __name__ == "__main__":
    main()
