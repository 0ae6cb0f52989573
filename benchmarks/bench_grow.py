"""Growing the taxonomy on WordNet text: a fitted model takes new leaves against a full refit.

The data: WordNet's noun glosses with their lemma names, every target cut to its ancestor at
depth 8 (``benchmarks.bench_text``'s cut: 10,689 classes, every one a target; each leaf holds the
rows of its whole subtree), split 80/20 and TF-IDF encoded once (``bench_text.make_text``).

A tenth of the leaves (drawn with the seed) are the *new* classes: the old tree lacks them, and
their training rows are held back. Side by side, in one process:

- ``old``: ``HierarchicalClassifier(old_tree, semantics="terminal")`` fitted on the other rows;
- ``refit``: the same estimator fitted afresh on the full tree and every training row;
- ``grown-parent``: ``old.grow(full_tree)``, no rows: each new class starts from its parent's row;
- ``grown-text``: the same with the classes' lemma names as ``class_features`` (text only);
- ``grown``: ``old.grow(full_tree, X_new, y_new, class_features=...)``: the new classes' training
  rows, with the default replay of the old classes' prototypes;
- ``grown-no-replay``: the same without the replay (what the replay is worth);
- ``grown-all``: ``train="all"``: the whole network trains, on the new rows and a tenth of the
  old training rows, with the replay.

Reported on the held-out rows of the new classes and of the old ones: hierarchical F1 (micro)
and exact accuracy; the time of each ``grow`` against the refit's fit; the load average. On the
side, with the refit model (10,689 classes): the time per row of ``explain_predictions``
against ``predict`` on the same held-out rows.

Usage::

    python -m benchmarks.bench_grow --out benchmarks/results/bench_grow.json
    python -m benchmarks.bench_grow --root dog.n.01 --cut-depth 0   # a small plumbing check
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def split_new_leaves(tree: Any, fraction: float, seed: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """The tree without a random ``fraction`` of its leaves (re-indexed, labels kept), the node
    id in it of every class of ``tree`` (``-1``: removed) and the removed leaves' ids."""
    from hiclass_parallel import Tree

    rng = np.random.default_rng(seed)
    leaves = np.flatnonzero(tree.is_leaf)
    new = np.sort(rng.choice(leaves, max(1, int(round(fraction * leaves.size))), replace=False))
    keep = np.setdiff1d(np.arange(tree.n_classes), new)
    old_id = np.full(tree.n_classes, -1, dtype=np.int64)
    old_id[keep] = np.arange(keep.size)
    parents = np.asarray(tree.parents)[keep]
    old_tree = Tree.from_parents(np.where(parents >= 0, old_id[np.maximum(parents, 0)], -1),
                                 labels=np.asarray(tree.labels)[keep].tolist())
    return old_tree, old_id, new


def _score(tree: Any, y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    from benchmarks.bench_peers import score

    if y.size == 0:
        return {"hf1": float("nan"), "exact": float("nan")}
    out = score(tree, y, pred)
    return {"hf1": out["hf1"], "exact": out["exact"]}


def time_explanations(clf: Any, X: Any) -> dict[str, float]:
    """Seconds per row of ``explain_predictions`` (exact, top 5 features per step) against
    ``predict`` on the same rows, best of two runs each."""
    from hiclass_parallel.estimators.explain import explain_predictions

    def best(fn: Any) -> float:
        times = []
        for _ in range(2):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    explain_s = best(lambda: explain_predictions(clf, X, top=5))
    predict_s = best(lambda: clf.predict(X))
    n = X.shape[0]
    out = {"rows": n, "n_classes": clf.tree_.n_classes, "explain_ms_per_row": 1e3 * explain_s / n,
           "predict_ms_per_row": 1e3 * predict_s / n, "load": os.getloadavg()[0]}
    print(f"explain {out['explain_ms_per_row']:.2f} ms/row, predict {out['predict_ms_per_row']:.2f} ms/row "
          f"({n} rows, {out['n_classes']} classes, load {out['load']:.1f})", flush=True)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.bench_peers import environment
    from benchmarks.bench_text import make_text
    from hiclass_parallel.estimators import HierarchicalClassifier

    start = time.perf_counter()
    data = make_text(args.root, args.seed, cut_depth=args.cut_depth or None)
    tree = data["tree"]
    old_tree, old_id, new_leaves = split_new_leaves(tree, args.fraction, args.seed)
    is_new = np.zeros(tree.n_classes, dtype=bool)
    is_new[new_leaves] = True
    X_train, y_train, X_test, y_test = data["X_train"], data["y_train"], data["X_test"], data["y_test"]
    new_train = is_new[y_train]
    new_test = is_new[y_test]
    report: dict[str, Any] = {
        "environment": environment(args.threads),
        "data": {"root": args.root, "cut_depth": args.cut_depth, "n_classes": tree.n_classes,
                 "n_old_classes": old_tree.n_classes, "n_new_classes": int(new_leaves.size),
                 "n_train": int(y_train.size), "n_train_new": int(new_train.sum()),
                 "n_test_new": int(new_test.sum()), "n_test_old": int((~new_test).sum()),
                 "n_features": int(X_train.shape[1]), "encode_s": time.perf_counter() - start},
        "results": {},
    }
    print(json.dumps(report["data"]), flush=True)
    params = {"semantics": "terminal", "random_state": args.seed}
    import torch

    torch.set_num_threads(args.threads)
    results = report["results"]

    def evaluate(name: str, clf: Any, ids: np.ndarray | None = None, seconds: float | None = None) -> None:
        pred = clf._predict_ids(X_test)
        if ids is not None:  # the old model's ids -> the full tree's
            back = np.flatnonzero(ids >= 0)
            full_of_old = np.full(int(ids.max()) + 2, -1, dtype=np.int64)
            full_of_old[ids[back]] = back
            pred = np.where(pred >= 0, full_of_old[pred], -1)
        results[name] = {"new": _score(tree, y_test[new_test], pred[new_test]),
                         "old": _score(tree, y_test[~new_test], pred[~new_test]),
                         "seconds": seconds, "load": os.getloadavg()[0]}
        extra = getattr(clf, "grown_", None)
        if extra is not None:
            results[name]["grown"] = {k: (v if k != "new_classes" else len(v)) for k, v in extra.items()}
        r = results[name]
        print(f"{name:16s} new hF1 {r['new']['hf1']:.3f} exact {r['new']['exact']:.3f} | old hF1 {r['old']['hf1']:.3f} "
              f"exact {r['old']['exact']:.3f} | {seconds or 0:.1f}s load {r['load']:.1f}", flush=True)

    t = time.perf_counter()
    refit = HierarchicalClassifier(tree, **params).fit(X_train, tree.labels[y_train])
    evaluate("refit", refit, seconds=time.perf_counter() - t)
    if args.explain_rows:
        report["explain"] = time_explanations(refit, X_test[: args.explain_rows])
    del refit

    t = time.perf_counter()
    old = HierarchicalClassifier(old_tree, **params).fit(X_train[~new_train], old_tree.labels[old_id[y_train[~new_train]]])
    evaluate("old", old, ids=old_id, seconds=time.perf_counter() - t)

    text = data["class_features"]
    X_new, y_new = X_train[new_train], y_train[new_train]
    old_rows = np.flatnonzero(~new_train)
    sample = np.sort(np.random.default_rng(args.seed).choice(old_rows, old_rows.size // 10, replace=False))
    variants = {
        "grown-parent": {},
        "grown-text": {"class_features": text},
        "grown": {"X": X_new, "y": tree.labels[y_new], "class_features": text},
        "grown-no-replay": {"X": X_new, "y": tree.labels[y_new], "class_features": text, "replay": None},
        # the whole network trains, on the new rows and a tenth of the old ones, with the replay
        "grown-all": {"X": sp.vstack([X_new, X_train[sample]], format="csr"),
                      "y": tree.labels[np.concatenate([y_new, y_train[sample]])], "class_features": text,
                      "train": "all"},
    }
    for name, kwargs in variants.items():
        clf = copy.deepcopy(old)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the calibrator is dropped, as documented
            t = time.perf_counter()
            clf.grow(tree, **kwargs)
            seconds = time.perf_counter() - t
        evaluate(name, clf, seconds=seconds)
    refit_s = results["refit"]["seconds"]
    for name in variants:
        results[name]["time_vs_refit"] = results[name]["seconds"] / refit_s
    report["load_average_end"] = os.getloadavg()[0]
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=float))
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=None, help="a synset to restrict to (default: every noun)")
    p.add_argument("--cut-depth", type=int, default=8, help="cut the targets to this depth (0: no cut)")
    p.add_argument("--fraction", type=float, default=0.1, help="fraction of the leaves that are new")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--explain-rows", type=int, default=2000,
                   help="time explain_predictions on this many held-out rows of the refit model (0: not)")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())
