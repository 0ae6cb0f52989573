"""Experiment: small WordNet subtrees over several splits, and a flat linear term in the re-ranking.

On trees of a few hundred classes one 80/20 split holds 38-235 test rows, so a ranking moves
with the split. This script fits, per subtree and split seed, on the same TF-IDF features as
``bench_text``:

- ``defaults``: ``HierarchicalClassifier(tree, semantics="terminal", random_state=seed)``;
- ``svc``: a flat ``LinearSVC()`` over the training targets;
- ``min-W`` / ``m1-W``: the defaults' ten best answers re-ranked by
  ``log p(answer) + W * decision(answer)``, the LinearSVC decision value of the answer's class
  (a class that is no training target gets the row's lowest decision, ``min``, or ``-1``).

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.explore_small_subtrees dog,vehicle,fish,bird,mammal 0,1,2 \\
        benchmarks/results/bench_small_subtrees_splits.json
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(subsets: list[str], seeds: list[int]) -> dict[str, dict[str, tuple[float, float]]]:
    """``{"<subset>-<seed>": {method: (hF1, exact)}}``."""
    import torch
    from sklearn.svm import LinearSVC

    from benchmarks._peers import ids_of_label_paths
    from benchmarks.bench_text import SUBSETS, make_text
    from hiclass_parallel import HierarchicalClassifier, Tree
    from hiclass_parallel.metrics import hierarchical_f1_score

    torch.set_num_threads(1)
    out = {}
    for name in subsets:
        for seed in seeds:
            d = make_text(SUBSETS[name], seed)
            tree = Tree.from_parents(np.asarray(d["tree"].parents))  # labels are node ids
            paths = np.asarray(tree.paths)
            X_train, X_test, y_train, y_test = d["X_train"], d["X_test"], d["y_train"], d["y_test"]
            clf = HierarchicalClassifier(tree, semantics="terminal", random_state=seed).fit(X_train, y_train)
            k = min(10, tree.n_classes)
            answers, log_prob = clf.predict_top_k(X_test, k, return_log_prob=True)
            n = answers.shape[0]
            answer_paths = np.stack([ids_of_label_paths(tree, answers[:, j], clf.pad_label_) for j in range(k)], 1)
            last = np.array([[p[p >= 0][-1] for p in row] for row in answer_paths])  # (n, k) node ids
            svc = LinearSVC().fit(X_train, y_train)
            decision = svc.decision_function(X_test)
            full = np.full((n, tree.n_classes), np.nan)
            full[:, svc.classes_] = decision
            S = np.take_along_axis(full, last, 1)
            res = {}

            def evaluate(pred_paths: np.ndarray, key: str) -> None:
                hf1 = hierarchical_f1_score(paths[y_test], pred_paths, tree, input_type="ids")
                exact = np.mean((pred_paths == paths[y_test]).all(1))
                res[key] = (round(float(hf1), 3), round(float(exact), 3))

            evaluate(ids_of_label_paths(tree, clf.predict(X_test), clf.pad_label_), "defaults")
            evaluate(paths[svc.classes_[np.argmax(decision, 1)]], "svc")
            lowest = np.nanmin(np.nan_to_num(S, nan=np.inf), 1, keepdims=True)
            for fill, value in (("min", lowest), ("m1", -1.0)):
                F = np.where(np.isnan(S), value, S)
                for w in (0.5, 1, 2, 4, 8):
                    best = np.argmax(log_prob + w * F, 1)
                    evaluate(paths[last[np.arange(n), best]], f"{fill}-{w}")
            out[f"{name}-{seed}"] = res
            print(name, seed, res, flush=True)
    return out


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    result = run(sys.argv[1].split(","), [int(s) for s in sys.argv[2].split(",")])
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps(result, indent=1))
