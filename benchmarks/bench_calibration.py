"""How well the probability of the predicted answer is calibrated, on WordNet hypernym placement.

For each subset of ``bench_text`` (glosses + lemma names, 80/20 split seed 0, one TF-IDF), the
defaults (``HierarchicalClassifier(tree, semantics="terminal")``) are fitted on the training
rows; on the held-out rows the answer is the best path (``predict_top_k(X, 1,
return_log_prob=True)``), its confidence ``exp(log_prob)`` (under the sibling partition with
stops the path probabilities of all answers sum to 1), and it is right when it is the true node.
Reported: the expected calibration error (ECE, 15 equal-width bins, weighted by their counts),
the maximum calibration error, mean confidence against accuracy, and the reliability curve
(a PNG with ``--plot``).

Usage::

    python -m benchmarks.bench_calibration --subsets person,nouns --out docs/_static/calibration.json \\
        --plot docs/_static/calibration.png
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
    """ECE, MCE and the per-bin (mean confidence, accuracy, count) of equal-width bins.

    Examples
    --------
    >>> r = reliability(np.array([0.9, 0.9, 0.1, 0.1]), np.array([True, True, False, False]), n_bins=10)
    >>> round(r["ece"], 3)
    0.1
    """
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, n_bins - 1)
    bins = []
    ece = mce = 0.0
    for b in range(n_bins):
        sel = which == b
        if not sel.any():
            continue
        conf, acc = float(confidence[sel].mean()), float(correct[sel].mean())
        gap = abs(conf - acc)
        ece += gap * sel.sum() / confidence.size
        mce = max(mce, gap)
        bins.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "confidence": conf, "accuracy": acc,
                     "count": int(sel.sum())})
    return {"ece": float(ece), "mce": float(mce), "mean_confidence": float(confidence.mean()),
            "accuracy": float(correct.mean()), "bins": bins}


def run_subset(name: str, seed: int) -> dict[str, Any]:
    from benchmarks._peers import ids_of_label_paths
    from hiclass_parallel.estimators import HierarchicalClassifier

    data = make_text(SUBSETS[name], seed)
    tree = data["tree"]
    labels = np.asarray(tree.labels, dtype=object)
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=seed)
    start = time.perf_counter()
    clf.fit(data["X_train"], labels[data["y_train"]])
    fit_s = time.perf_counter() - start
    paths, log_prob = clf.predict_top_k(data["X_test"], 1, return_log_prob=True)
    ids = ids_of_label_paths(tree, paths[:, 0], clf.pad_label_)
    depth = (ids >= 0).sum(1)
    predicted = ids[np.arange(ids.shape[0]), depth - 1]
    confidence = np.exp(log_prob[:, 0].astype(np.float64))
    correct = predicted == data["y_test"]
    out = reliability(confidence, correct)
    out.update(subset=name, n_test=int(correct.size), fit_s=round(fit_s, 1), load=os.getloadavg())
    return out


def plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfect calibration")
    for r in results:
        conf = [b["confidence"] for b in r["bins"]]
        acc = [b["accuracy"] for b in r["bins"]]
        ax.plot(conf, acc, marker="o", ms=3, label=f"{r['subset']} (ECE {r['ece']:.3f})")
    ax.set_xlabel("confidence of the predicted answer")
    ax.set_ylabel("exact accuracy")
    ax.set_title("Reliability of the defaults (WordNet glosses)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_calibration", description=__doc__.split("\n\n")[0])
    p.add_argument("--subsets", default="person,nouns")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON report path")
    p.add_argument("--plot", default=None, help="reliability curve (PNG)")
    args = p.parse_args(argv)
    results = []
    for name in args.subsets.split(","):
        r = run_subset(name, args.seed)
        results.append(r)
        print(f"{name}: ECE {r['ece']:.3f}, MCE {r['mce']:.3f}, mean confidence {r['mean_confidence']:.3f}, "
              f"exact {r['accuracy']:.3f}, n={r['n_test']}, fit {r['fit_s']} s, load {r['load'][0]:.1f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
