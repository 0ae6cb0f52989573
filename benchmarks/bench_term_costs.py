"""The cost of the answer's terms against the network's fit: measured seconds beside the estimates.

Fits, per gloss subset (``bench_text``'s data, split seed 0, one thread), the network alone
(``prototypes=None, flat_term=None, path_term=None, calibration=None``), then on the same rows
the flat SVM against every row (``FlatMargins.fit``), the path-level SVM (``PathMargins.fit``),
the SVM of the candidates (``FlatMargins.fit_on_candidates`` on the fitted network's
``prototype_candidates`` most probable answers) and the class prototypes,
and prints each part's seconds over the network's beside its estimated cost over the network's
(:mod:`hiclass_parallel.estimators.fitting._costs`): ``SVM_PASSES`` (``estimators/_defaults.py``)
times the measured ratio over the estimated one is the effective passes that would make the
estimate of the SVM against every row the time. It ends with the constants that would make the
estimates the times: ``SVM_PASSES``, ``DECODE_SHARE`` (the decoding of the SVM of the
candidates) and ``SOLVE_SHARE`` (the path-level term's least-squares system) as geometric means
over the subsets, ``SVM_TARGET_COST`` (the SVM of the candidates'
cost per target) as the largest, since an estimate that counts too little breaks the fit-time
targets where one that counts too much only leaves a term out.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.bench_term_costs fungus,weapon,plant,artifact out.json [--no-flat artifact]
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


def measure(name: str, flat: bool = True) -> dict[str, float]:
    """Seconds and estimated costs of the parts on one subset (``flat=False``: skip the SVM
    against every row and the path-level SVM, which take minutes on thousands of targets)."""
    import torch

    from benchmarks.bench_text import CUTS, SUBSETS, make_text
    from hiclass_parallel import HierarchicalClassifier, Tree
    from hiclass_parallel.estimators import FlatMargins
    from hiclass_parallel.estimators.fitting import _costs
    from hiclass_parallel.estimators.prediction._decode import decoder_of
    from hiclass_parallel.estimators._defaults import DECODE_SHARE, SVM_TARGET_COST
    from hiclass_parallel.estimators.answer import AnswerModel, ClassPrototypes, PathMargins, last_nodes

    torch.set_num_threads(1)
    root = SUBSETS[name] if name in SUBSETS else (name if "." in name else f"{name}.n.01")
    d = make_text(root, 0, cut_depth=CUTS.get(name))
    tree = Tree.from_parents(np.asarray(d["tree"].parents))
    X, y = d["X_train"], d["y_train"]
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=0, prototypes=None, flat_term=None,
                                 path_term=None, calibration=None)
    start = time.perf_counter()
    clf.fit(X, y)
    out = {"rows": X.shape[0], "targets": int(np.unique(y).size), "classes": tree.n_classes,
           "network_s": time.perf_counter() - start, "epochs": clf.config_.max_epochs}
    ids = np.asarray(y)
    hidden = _costs.hidden_width(clf, clf.config_.module_class)
    columns = _costs.mean_path_columns(clf.targets_.tree, ids, clf.config_.stop, clf.config_.softmax_sample)
    net_cost = _costs.network_cost(X, columns, clf.config_.max_epochs, hidden)
    out["network_cost"] = net_cost
    if flat:
        start = time.perf_counter()
        FlatMargins.fit(X, ids, tree.n_classes, random_state=0)
        out["flat_s"] = time.perf_counter() - start
        out["flat_cost"] = _costs.flat_svm_cost(X, out["targets"])
        out["path_cost"], solver = _costs.path_term_cost(X, _costs.level_classes(tree, ids))
        out["path_route"] = "least squares" if solver == "least_squares" else "a SVM a level"
        start = time.perf_counter()
        PathMargins.fit(X, ids, tree, random_state=0, solver=solver)
        out["path_s"] = time.perf_counter() - start
    decoder = decoder_of(clf, clf.net_, clf.targets_, clf.config_, AnswerModel(), rows=lambda rows: rows)
    start = time.perf_counter()
    paths, _, _ = decoder.model_paths(X, min(decoder.prototype_candidates, decoder.n_candidates))
    out["decode_s"] = time.perf_counter() - start
    decode_cost = _costs.decode_cost(X, clf.prototype_candidates, columns, hidden)
    # the decoding estimate at one training multiply-add each (DECODE_SHARE 1): its measured share
    out["decode_cost"] = decode_cost / DECODE_SHARE
    start = time.perf_counter()
    FlatMargins.fit_on_candidates(X, ids, last_nodes(paths), tree.n_classes, random_state=0)
    out["candidates_s"] = time.perf_counter() - start + out["decode_s"]
    out["candidates_cost"] = _costs.candidates_svm_cost(X, out["targets"], clf.prototype_candidates, columns, hidden)
    start = time.perf_counter()
    ClassPrototypes.from_rows(X, ids, clf.targets_.tree)
    out["prototypes_s"] = time.perf_counter() - start
    out["prototypes_cost"] = _costs.prototypes_cost(X)
    # The per-target cost that makes the SVM of the candidates' estimate its time (in the
    # network's multiply-adds: its seconds per estimated multiply-add on this subset).
    svm_s = out["candidates_s"] - out["decode_s"]
    passes = out["candidates_cost"] - decode_cost - out["targets"] * SVM_TARGET_COST
    out["target_cost"] = (svm_s * net_cost / out["network_s"] - passes) / out["targets"]
    for part in ("flat", "path", "decode", "candidates", "prototypes"):
        if f"{part}_s" in out:
            time_ratio = out[f"{part}_s"] / out["network_s"]
            cost_ratio = out[f"{part}_cost"] / net_cost
            out[f"{part}_time_ratio"], out[f"{part}_cost_ratio"] = time_ratio, cost_ratio
            # the estimate's ratio over the measured one (1: the estimate is the time)
            out[f"{part}_estimate_over_time"] = cost_ratio / time_ratio
    return out


def _geometric_mean(result: dict[str, dict[str, float]], part: str) -> float:
    """The geometric mean over the subsets of ``part``'s estimate over its measured time."""
    ratios = [r[f"{part}_estimate_over_time"] for r in result.values() if f"{part}_estimate_over_time" in r]
    return float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")


if __name__ == "__main__":
    from hiclass_parallel.estimators._defaults import SOLVE_SHARE, SVM_PASSES

    warnings.filterwarnings("ignore")
    names = sys.argv[1].split(",")
    skip = set(sys.argv[sys.argv.index("--no-flat") + 1].split(",")) if "--no-flat" in sys.argv else set()
    before = os.getloadavg()
    result = {}
    for name in names:
        result[name] = measure(name, flat=name not in skip)
        print(name, {k: round(v, 4) if isinstance(v, float) else v for k, v in result[name].items()}, flush=True)
    # The constants that would make the estimates the times: the geometric means over the subsets.
    fitted = {"SVM_PASSES": SVM_PASSES / _geometric_mean(result, "flat"),
              "DECODE_SHARE": 1.0 / _geometric_mean(result, "decode"),
              # the largest: an estimate that counts too little breaks the fit-time targets
              "SVM_TARGET_COST": max(r["target_cost"] for r in result.values())}
    # The path-level term's one least-squares system where its rows are fewer than its features
    # (sparse rows more than features fit a SVM a level, counted by SVM_PASSES).
    solved = {k: r for k, r in result.items() if r.get("path_route") == "least squares"}
    if solved:
        fitted["SOLVE_SHARE"] = SOLVE_SHARE / _geometric_mean(solved, "path")
    print("constants that make the estimates the measured times:", {k: round(v, 4) for k, v in fitted.items()})
    Path(sys.argv[2]).write_text(json.dumps({"load_average_before": before, "load_average": os.getloadavg(),
                                             "svm_passes_of_the_estimates": SVM_PASSES, "fitted_constants": fitted,
                                             "subsets": result}, indent=1))
