"""How well the answer model's learnt weights serve the final model: variants scored on the test rows' candidates.

Per small WordNet subtree and split seed (``bench_text``'s TF-IDF features, as
``explore_small_subtrees``), one fit with both terms built (``prototypes=1.0, flat_term=1.0``:
fixed weights, so nothing is learnt in the fit), then:

- the training rows' cross-fitted candidates and term scores, as the default fit learns its
  weights on them (``fitting._answer_fit.cross_fitted_candidates``: each fold scored by a model
  fitted on the other fold);
- the test rows' candidates and term scores by the final model.

Each variant learns weights on the cross-fitted rows (or sets them) and answers every test row
with its best candidate by ``log p + sum_i w_i * term_i``; it prints hF1 / exact per subtree and
the mean:

- ``network``: no term (the network's own answer);
- ``learnt``: the joint fit as the defaults run it (``answer._joint.fit_term_weights``);
- ``learnt-x0.5``, ``learnt-x1.5``: those weights halved, and half as large again (do the weights
  learnt on fold models of fewer rows suit the final model?);
- ``flat-only``, ``prototypes-only``: one term learnt alone;
- ``svm``: the flat SVM alone among the candidates (its weight unbounded), which is about
  ``LinearSVC``: how much the candidates keep of it;
- ``oracle``: the right answer wherever it is a candidate, the bound of any re-ranking;
- ``ancestral-svm``: a third term beside the two, the path-level SVM
  (:class:`~hiclass_parallel.estimators.answer.PathMargins`: a candidate path's summed margins
  of one-vs-rest SVMs of every node, a row positive for every node on its target's path),
  fitted on the other fold's rows for the training rows and on every training row for the test
  rows (what ``path_term`` adds), with the seconds of its fits.

Usage::

    OMP_NUM_THREADS=1 python -m benchmarks.explore_answer_weights fungus,mineral,grass 0,1,2 out.json
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

VARIANTS = ("network", "learnt", "learnt-x0.5", "learnt-x1.5", "flat-only", "prototypes-only", "svm", "oracle",
            "ancestral-svm")


def candidates_of(name: str, seed: int) -> dict:
    """The cross-fitted training candidates and the final model's test candidates of one split."""
    import torch

    from benchmarks.bench_text import SUBSETS, make_text
    from hiclass_parallel import HierarchicalClassifier, Tree
    from hiclass_parallel.estimators.answer import PathMargins, last_nodes, term_scores
    from sklearn.utils import check_random_state

    from hiclass_parallel.estimators.fitting._answer_fit import FOLDS, cross_fitted_candidates
    from hiclass_parallel.estimators.prediction import decoder_of

    torch.set_num_threads(1)
    d = make_text(SUBSETS[name] if name in SUBSETS else (name if "." in name else f"{name}.n.01"), seed)
    tree = Tree.from_parents(np.asarray(d["tree"].parents))  # labels are node ids
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=seed, prototypes=1.0, flat_term=1.0,
                                 path_term=None)
    clf.fit(d["X_train"], d["y_train"])
    X_train = clf._validate_X(d["X_train"], reset=False)
    y_train = np.asarray(d["y_train"])
    train = cross_fitted_candidates(clf, X_train, y_train, None, clf.targets_, clf.config_, clf.answer_, seed)
    X_test = clf._validate_X(d["X_test"], reset=False)
    decoder = decoder_of(clf, clf.net_, clf.targets_, clf.config_, clf.answer_, rows=lambda rows: rows)
    paths, log_prob, _ = decoder.candidates(X_test)
    test = (paths, log_prob, term_scores(clf.answer_.terms, X_test, last_nodes(paths)))
    # the ancestral SVM's scores: the training rows' by the other fold's SVMs (the folds of
    # cross_fitted_candidates), the test rows' by those of every training row
    fold_of = check_random_state(seed).permutation(X_train.shape[0]) % FOLDS
    seconds = {}
    for variant in ("ancestral-svm",):
        ancestral = np.zeros(train[1].shape, dtype=np.float32)
        start = time.perf_counter()
        for fold in range(FOLDS):
            held, fit = fold_of == fold, fold_of != fold
            term = PathMargins.fit(X_train[fit], y_train[fit], tree, random_state=seed)
            ancestral[held] = term.score(X_train[held], last_nodes(train[0][held]))
        train[2][variant] = ancestral
        test[2][variant] = PathMargins.fit(X_train, y_train, tree, random_state=seed).score(
            X_test, last_nodes(paths))
        seconds[variant] = time.perf_counter() - start
    return {"tree": tree, "train": train, "y_train": y_train, "test": test, "y_test": np.asarray(d["y_test"]),
            "seconds": seconds}


def evaluate(split: dict) -> dict[str, list[float]]:
    """``{variant: [hF1, exact]}`` on the split's test rows."""
    from hiclass_parallel.estimators.answer import answer_correct
    from hiclass_parallel.estimators.answer._joint import fit_term_weights
    from hiclass_parallel.metrics import hierarchical_f1_score

    def correct(paths: np.ndarray, true: np.ndarray) -> np.ndarray:
        n, k, depth = paths.shape
        return answer_correct(paths.reshape(n * k, depth), np.repeat(true, k), "terminal").reshape(n, k)

    def learnt(names: tuple[str, ...]) -> dict[str, float]:
        paths, log_prob, scores = split["train"]
        fitted = fit_term_weights(log_prob, {n: scores[n] for n in names}, correct(paths, split["y_train"]))
        return {} if fitted is None else fitted.weights

    paths, log_prob, scores = split["test"]
    right = correct(paths, split["y_test"]).astype(np.float64)
    both = learnt(("prototypes", "flat_term"))
    weights = {"network": {}, "learnt": both, "learnt-x0.5": {k: v * 0.5 for k, v in both.items()},
               "learnt-x1.5": {k: v * 1.5 for k, v in both.items()}, "flat-only": learnt(("flat_term",)),
               "prototypes-only": learnt(("prototypes",)), "svm": {"flat_term": 1e6}, "oracle": {"right": 1e6},
               "ancestral-svm": learnt(("prototypes", "flat_term", "ancestral-svm"))}
    scores = {**scores, "right": right}
    tree = split["tree"]
    true = np.asarray(tree.paths)[split["y_test"]]
    out = {}
    for variant, w in weights.items():
        z = log_prob.astype(np.float64) + sum(v * np.nan_to_num(scores[k]) for k, v in w.items() if v)
        z[~np.isfinite(log_prob)] = -np.inf
        chosen = paths[np.arange(len(z)), np.argmax(z, axis=1)]
        width = max(true.shape[1], chosen.shape[1])
        t = np.pad(true, ((0, 0), (0, width - true.shape[1])), constant_values=-1)
        c = np.pad(chosen, ((0, 0), (0, width - chosen.shape[1])), constant_values=-1)
        out[variant] = [round(float(hierarchical_f1_score(t, c, tree, input_type="ids")), 4),
                        round(float(np.mean((t == c).all(axis=1))), 4)]
    for variant, spent in split["seconds"].items():  # the term's fits (both folds' and the final)
        out[variant].append(round(spent, 3))
    return out


def run(subsets: list[str], seeds: list[int]) -> dict[str, dict[str, list[float]]]:
    out = {}
    for name in subsets:
        for seed in seeds:
            out[f"{name}-{seed}"] = evaluate(candidates_of(name, seed))
            print(name, seed, out[f"{name}-{seed}"], flush=True)
    for name in subsets:
        rows = [v for k, v in out.items() if k.rsplit("-", 1)[0] == name]
        means = {v: np.mean([r[v][:2] for r in rows], axis=0) for v in VARIANTS}
        print(f"{name:20s}", "  ".join(f"{v} {m[0]:.3f}/{m[1]:.3f}" for v, m in means.items()))
    print("mean", {v: np.round(np.mean([r[v][:2] for r in out.values()], axis=0), 4).tolist() for v in VARIANTS})
    print("seconds", {v: round(float(np.sum([r[v][2] for r in out.values()])), 2) for v in VARIANTS if len(
        next(iter(out.values()))[v]) > 2})
    return out


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    load_before = os.getloadavg()
    result = run(sys.argv[1].split(","), [int(s) for s in sys.argv[2].split(",")])
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps({"load_average": os.getloadavg(), "load_average_before": load_before,
                                                 "runs": result}, indent=1))
