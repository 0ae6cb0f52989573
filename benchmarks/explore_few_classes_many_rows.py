"""Experiment: few classes with many rows each, on text, where a flat ``LinearSVC`` competes.

WordNet glosses (TF-IDF as in ``bench_text``) labelled with their ancestor at a small depth
(``cut_to_depth``: itself when shallower), training rows optionally subsampled (seed 0) so
that the fit holds rows out for calibration and the flat term's work is near its limit. Fits
the defaults, the defaults with ``flat_term=None`` and with ``flat_term=16`` (the term
wherever it can be fitted, past ``"auto"``'s limits) and a flat ``LinearSVC()`` on the same
split (``bench_text.make_text``, 80/20, seed 0) and prints hF1, exact accuracy and fit time.
Beyond the limits of the SVM against every row, a set weight fits the SVM of the candidates
(``config_.flat_term_reason`` says which). ``--flat-weights 8,16,32`` fits the term at each of
those weights instead of 16 alone; ``--no-svc`` skips ``LinearSVC`` (a flat model of thousands
of targets over hundreds of thousands of features needs tens of GB).

Usage (``<root>:<depth>:<training rows, 0 for all>``, ``nouns`` for every noun, depth ``all``
for the targets uncut)::

    python -m benchmarks.explore_few_classes_many_rows artifact.n.01:1:0 nouns:2:0 nouns:3:8000
    python -m benchmarks.explore_few_classes_many_rows --flat-weights 8,16,32 --no-svc nouns:6:0
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(specs: list[str], flat_weights: tuple[float, ...] = (16.0,), svc: bool = True) -> None:
    """One block per ``root:depth:rows`` spec: the defaults, no flat term, the flat term at
    each of ``flat_weights``, and (``svc``) a flat ``LinearSVC``."""
    import torch
    from sklearn.svm import LinearSVC

    from benchmarks.bench_text import make_text
    from hiclass_parallel.estimators import HierarchicalClassifier
    from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_f1_score

    torch.set_num_threads(2)
    for spec in specs:
        root, depth, rows = spec.split(":")
        data = make_text(None if root == "nouns" else root, cut_depth=None if depth == "all" else int(depth))
        tree = data["tree"]
        keep = np.arange(data["X_train"].shape[0])
        if int(rows):
            keep = np.sort(np.random.default_rng(0).permutation(keep.size)[: int(rows)])
        X_train, ids = data["X_train"][keep], np.asarray(data["y_train"])[keep]
        y_train, y_test = tree.labels[ids], tree.labels[data["y_test"]]
        n_targets = np.unique(ids).size
        print(f"{root} at depth {depth}: {keep.size} training rows, {n_targets} targets, targets x non-zeros "
              f"{n_targets * X_train.nnz:,}, load {os.getloadavg()[0]:.2f}", flush=True)

        def report(name: str, fit, predict) -> None:
            start = time.perf_counter()
            fit()
            fit_s = time.perf_counter() - start
            pred = predict()
            print(f"  {name:>10}: hF1 {hierarchical_f1_score(y_test, pred, tree):.4f} exact "
                  f"{exact_path_accuracy_score(y_test, pred, tree):.4f} fit {fit_s:.1f} s", flush=True)

        methods = [("defaults", {}), ("noflat", {"flat_term": None})]
        methods += [(f"flat{weight:g}", {"flat_term": weight}) for weight in flat_weights]
        for name, params in methods:
            clf = HierarchicalClassifier(tree, semantics="terminal", random_state=0, **params)
            report(name, lambda: clf.fit(X_train, y_train), lambda: clf.predict(data["X_test"]))
            print(f"{'':14}calibrated: {clf.answer_.calibrator is not None}; flat term {clf.answer_.weight('flat_term'):g}: "
                  f"{clf.config_.flat_term_reason}", flush=True)
        if svc:
            svm = LinearSVC(random_state=0)
            report("linear-svc", lambda: svm.fit(X_train, ids), lambda: tree.labels[svm.predict(data["X_test"])])


if __name__ == "__main__":
    import argparse

    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("specs", nargs="+", help="<root>:<depth or all>:<training rows, 0 for all>")
    parser.add_argument("--flat-weights", default="16", help="weights of the flat term, comma-separated")
    parser.add_argument("--no-svc", action="store_true", help="skip the flat LinearSVC")
    args = parser.parse_args()
    run(args.specs, tuple(float(w) for w in args.flat_weights.split(",")), svc=not args.no_svc)
