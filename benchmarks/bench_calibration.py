"""How well the probability of the predicted answer is calibrated, on WordNet hypernym placement.

For each subset of ``bench_text`` (glosses + lemma names, 80/20 split, one TF-IDF), the
defaults (``HierarchicalClassifier(tree, semantics="terminal")``, plus ``--params``) are fitted
on the training rows; on the held-out rows the answer is the best path (``predict_node``) and
it is right when it is the true node. Two confidences are scored: the model's own probability
of its answer (``exp`` of ``predict_top_k(X, 1, return_log_prob=True)``; under the sibling
partition with stops the answers' probabilities sum to 1) and ``predict_confidence`` (the
same, mapped by ``answer_.calibrator`` when the fit calibrated). Reported: the expected calibration
error (ECE, 15 equal-width bins, weighted by their counts), the maximum calibration error,
mean confidence against accuracy, hF1, and the reliability curves (a PNG with ``--plot``).
``--compare JSON`` fits a second configuration in the same run (e.g. ``'{"calibration": null}'``,
every epoch on every row) and reports its exact accuracy and hF1 beside, for what the held-out
rows cost.

Usage::

    python -m benchmarks.bench_calibration --subsets person,nouns --compare '{"calibration": null}' \\
        --out benchmarks/results/calibration.json --plot docs/_static/calibration.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_text import SUBSETS, make_text

N_BINS = 15


def reliability(confidence: np.ndarray, correct: np.ndarray, n_bins: int = N_BINS) -> dict[str, Any]:
    """ECE, MCE and the per-bin (mean confidence, accuracy, count) of equal-width bins
    (:func:`hiclass_parallel.metrics.expected_calibration_error` with its bins).

    Examples
    --------
    >>> r = reliability(np.array([0.9, 0.9, 0.1, 0.1]), np.array([True, True, False, False]), n_bins=10)
    >>> round(r["ece"], 3)
    0.1
    """
    from hiclass_parallel.metrics import expected_calibration_error

    ece, bins = expected_calibration_error(correct, confidence, n_bins=n_bins, return_bins=True)
    mce = max(abs(b["confidence"] - b["accuracy"]) for b in bins)
    return {"ece": ece, "mce": float(mce), "mean_confidence": float(np.mean(confidence)),
            "accuracy": float(np.mean(correct)), "bins": bins}


def _fit_and_score(data: dict[str, Any], seed: int, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from benchmarks.bench_peers import score
    from hiclass_parallel.estimators import HierarchicalClassifier

    tree = data["tree"]
    labels = np.asarray(tree.labels, dtype=object)
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=seed, **params)
    start = time.perf_counter()
    clf.fit(data["X_train"], labels[data["y_train"]])
    fit_s = time.perf_counter() - start
    paths = clf._predict_ids(data["X_test"])
    scores = score(tree, data["y_test"], paths)
    return clf, {"fit_s": round(fit_s, 1), "hf1": scores["hf1"], "exact": scores["exact"]}


def run_subset(name: str, seed: int, params: dict[str, Any] | None = None,
               compare: dict[str, Any] | None = None) -> dict[str, Any]:
    data = make_text(SUBSETS[name], seed)
    clf, fitted = _fit_and_score(data, seed, params or {})
    _, log_prob = clf.predict_top_k(data["X_test"], 1, return_log_prob=True)
    correct = clf.predict_node(data["X_test"]) == data["y_test"]
    raw = reliability(np.exp(log_prob[:, 0].astype(np.float64)), correct)
    calibrated = reliability(clf.predict_confidence(data["X_test"]), correct)
    out = {"subset": name, "params": params or {}, "n_test": int(correct.size), **fitted,
           "calibrator": None if clf.answer_.calibrator is None else clf.answer_.calibrator.to_dict(),
           "raw": raw, "calibrated": calibrated}
    if compare is not None:
        _, other = _fit_and_score(data, seed, compare)
        out["compare"] = {"params": compare, **other}
    out["load"] = os.getloadavg()
    return out


def plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect calibration")
    for i, r in enumerate(results):
        color = f"C{i}"
        for key, style, what in (("raw", ":", "model"), ("calibrated", "-", "calibrated")):
            bins = r[key]["bins"]
            ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], ls=style, marker="o", ms=3,
                    color=color, label=f"{r['subset']} {what} (ECE {r[key]['ece']:.3f})")
    ax.set_xlabel("confidence of the predicted answer")
    ax.set_ylabel("exact accuracy")
    ax.set_title("Reliability of the defaults (WordNet glosses)")
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_calibration", description=__doc__.split("\n\n")[0])
    p.add_argument("--subsets", default="person,nouns")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--params", default="{}", help="JSON: classifier parameters besides the defaults")
    p.add_argument("--compare", default=None, help="JSON: a second configuration fitted in the same run")
    p.add_argument("--out", default=None, help="JSON report path")
    p.add_argument("--plot", default=None, help="reliability curves (PNG)")
    p.add_argument("--plot-subsets", default=None, help="the subsets drawn (default: all measured)")
    p.add_argument("--replot", default=None, help="draw --plot from this saved report instead of measuring")
    args = p.parse_args(argv)
    if args.replot:
        _plot_some(json.loads(Path(args.replot).read_text()), args.plot, args.plot_subsets)
        return
    params = json.loads(args.params)
    compare = None if args.compare is None else json.loads(args.compare)
    results = []
    for name in args.subsets.split(","):
        r = run_subset(name, args.seed, params, compare)
        results.append(r)
        line = (f"{name}: exact {r['exact']:.4f}, hF1 {r['hf1']:.4f}, ECE model {r['raw']['ece']:.3f} -> calibrated "
                f"{r['calibrated']['ece']:.3f} (mean confidence {r['raw']['mean_confidence']:.3f} -> "
                f"{r['calibrated']['mean_confidence']:.3f}), fit {r['fit_s']} s")
        if compare is not None:
            c = r["compare"]
            line += f"; {json.dumps(compare)}: exact {c['exact']:.4f}, hF1 {c['hf1']:.4f}, fit {c['fit_s']} s"
        print(f"{line}; load {r['load'][0]:.1f}", flush=True)
        if args.out:  # written after each subset: a long run keeps what it measured
            Path(args.out).write_text(json.dumps(results, indent=1))
    if args.plot:
        _plot_some(results, args.plot, args.plot_subsets)


def _plot_some(results: list[dict[str, Any]], path: str, subsets: str | None) -> None:
    keep = None if subsets is None else subsets.split(",")
    plot([r for r in results if keep is None or r["subset"] in keep], path)


if __name__ == "__main__":
    main()
