"""The device step's host planner on WordNet's nouns: time per batch and the plans' shapes.

The device training step (``hiclass_parallel/estimators/networks/engines/device``) plans each batch on
the host (:class:`~hiclass_parallel.estimators.networks.engines.device.StepPlanner`) while the step
before it runs on the GPU; with no host synchronisation in a step, the host's own work per
batch (the loader's row gather, the planning, the launches) bounds the step rate. This times
the planning of ``--batches`` shuffled 256-row batches of the nouns' glosses (TF-IDF, as
``bench_text``), partial semantics without stops and terminal semantics with stops, both with
the in-batch level term, on one thread, and reports the median per batch, the row gather alone,
how many distinct plan shapes (CUDA graphs, kernel specialisations) the batches needed, and the
plan's size. No GPU is needed.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.bench_step_plan --batches 100
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()

    from benchmarks.bench_text import make_text
    from hiclass_parallel.estimators.networks.engines.device import StepPlanner
    from hiclass_parallel.ops.sibling_paths import sibling_plan

    data = make_text(None, 0, pos="n")
    X, y, tree = data["X_train"], data["y_train"], data["tree"]
    order = np.random.default_rng(0).permutation(X.shape[0])
    B = args.batch_size
    batches = [order[i * B:(i + 1) * B] for i in range(min(args.batches, X.shape[0] // B))]
    results = []
    for stop, terminal in ((False, False), (True, True)):
        planner = StepPlanner(sibling_plan(tree, stop), terminal, level_contrast=0.1, batch_rows=B)
        times, gathers, keys = [], [], set()
        for idx in batches:
            t0 = time.perf_counter()
            Xb = X[idx]
            t1 = time.perf_counter()
            plan = planner(Xb, y[idx])
            t2 = time.perf_counter()
            gathers.append(t1 - t0)
            times.append(t2 - t1)
            keys.add(plan.key)
        row = {"stop": stop, "semantics": "terminal" if terminal else "partial", "batches": len(batches),
               "plan_ms": 1e3 * float(np.median(times)), "gather_ms": 1e3 * float(np.median(gathers)),
               "shapes": len(keys), "plan_mb": plan.buffer.numel() * 4 / 1e6}
        results.append(row)
        print(f"stop={stop} {row['semantics']}: plan {row['plan_ms']:.2f} ms/batch (median), row gather "
              f"{row['gather_ms']:.2f} ms, {row['shapes']} plan shapes over {row['batches']} batches, "
              f"{row['plan_mb']:.2f} MB per plan", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"classes": int(tree.n_classes), "rows": int(X.shape[0]), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
