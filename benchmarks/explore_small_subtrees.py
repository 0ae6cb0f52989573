"""Small WordNet subtrees over several splits: the defaults, their parts, the previous defaults, LinearSVC.

On trees of a few hundred classes one 80/20 split holds 38-235 test rows, so a ranking moves
with the split: this script fits, per subtree and split seed, on the same TF-IDF features as
``bench_text`` (glosses with lemma names):

- ``defaults``: ``HierarchicalClassifier(tree, semantics="terminal", random_state=seed)`` (the
  answer model: the terms within the cost budget, their weights learnt on held-out rows,
  ``config_.terms_tried_reason``, ``config_.term_weights_reason``; ``batch_size="auto"`` trains
  in batches of 32-128 on these fits: ``config_.batch_size_reason``);
- ``network``: the network alone (``prototypes=None, flat_term=None, path_term=None``);
- ``no-path-term``: the defaults with ``path_term=None``;
- ``no-flat-term``: the defaults with ``flat_term=None``;
- ``batch-256``: the defaults with ``batch_size=256`` (the terms without the small batches);
- ``previous``: ``flat_term=None, path_term=None, batch_size=256``, the defaults before the linear terms and the small batches;
- ``linear-svc``: a flat ``LinearSVC()`` over the training targets.

A subtree is named by its ``bench_text`` subset name (``nouns``: every noun) or by a noun
synset's first lemma (``tool`` is ``tool.n.01``). It prints each subtree's mean hF1 / exact over the seeds, and the
mean over all. A fourth argument, a JSON object ``{name: parameters}``, adds candidate settings
of the defaults as more methods (``{"flat-8": {"flat_term": 8.0}}``); a fifth, a comma-separated list of
method names, runs only those.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.explore_small_subtrees dog,vehicle,fish,bird,mammal 0,1,2,3,4 \\
        benchmarks/results/bench_small_subtrees_flat.json ['{"flat-8": {"flat_term": 8.0}}']
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METHODS = ("defaults", "network", "no-path-term", "no-flat-term", "batch-256", "previous", "linear-svc")
PARAMS = {"defaults": {}, "network": {"prototypes": None, "flat_term": None, "path_term": None},
          "no-path-term": {"path_term": None}, "no-flat-term": {"flat_term": None},
          "batch-256": {"batch_size": 256}, "previous": {"flat_term": None, "path_term": None, "batch_size": 256}}


def run(subsets: list[str], seeds: list[int], candidates: dict[str, dict] | None = None,
        only: list[str] | None = None) -> dict[str, dict[str, list[float]]]:
    """``{"<subset>-<seed>": {method: [hF1, exact, fit and predict seconds, fit seconds]}}``; ``candidates`` adds methods
    (name: parameters of the defaults); ``only`` keeps these methods (``None``: all)."""
    params_of = {**PARAMS, **(candidates or {})}
    methods = tuple(m for m in METHODS + tuple(candidates or ()) if only is None or m in only)
    import torch
    from sklearn.svm import LinearSVC

    from benchmarks._peers import ids_of_label_paths
    from benchmarks.bench_text import SUBSETS, make_text
    from hiclass_parallel import HierarchicalClassifier, Tree
    from hiclass_parallel.metrics import hierarchical_f1_score

    torch.set_num_threads(1)
    out = {}
    for name in subsets:
        root = SUBSETS[name] if name in SUBSETS else (name if "." in name else f"{name}.n.01")  # nouns: None
        for seed in seeds:
            d = make_text(root, seed)
            tree = Tree.from_parents(np.asarray(d["tree"].parents))  # labels are node ids
            paths = np.asarray(tree.paths)
            X_train, X_test, y_train, y_test = d["X_train"], d["X_test"], d["y_train"], d["y_test"]
            res = {}
            for method in methods:
                start = time.perf_counter()
                if method == "linear-svc":
                    pred = paths[LinearSVC().fit(X_train, y_train).predict(X_test)]
                else:
                    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=seed, **params_of[method])
                    clf.fit(X_train, y_train)
                    fitted = time.perf_counter()
                    pred = ids_of_label_paths(tree, clf.predict(X_test), clf.pad_label_)
                seconds = time.perf_counter() - start
                fit_seconds = (fitted if method != "linear-svc" else time.perf_counter()) - start
                hf1 = hierarchical_f1_score(paths[y_test], pred, tree, input_type="ids")
                exact = np.mean((pred == paths[y_test]).all(1))
                res[method] = [round(float(hf1), 4), round(float(exact), 4), round(seconds, 3), round(fit_seconds, 3)]
            out[f"{name}-{seed}"] = res
            print(name, seed, res, flush=True)
    for name in subsets:
        rows = [v for k, v in out.items() if k.rsplit("-", 1)[0] == name]
        print(name, {m: np.round(np.mean([r[m][:2] for r in rows], 0), 3).tolist() for m in methods})
    print("all", {m: np.round(np.mean([r[m][:2] for r in out.values()], 0), 4).tolist() for m in methods})
    return out


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    load_before = os.getloadavg()
    result = run(sys.argv[1].split(","), [int(s) for s in sys.argv[2].split(",")],
                 json.loads(sys.argv[4]) if len(sys.argv) > 4 else None,
                 sys.argv[5].split(",") if len(sys.argv) > 5 else None)
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps({"load_average": os.getloadavg(), "load_average_before": load_before,
                                                 "runs": result}, indent=1))
