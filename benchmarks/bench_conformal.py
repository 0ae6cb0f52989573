"""Answers with a guarantee on WordNet hypernym placement: conformal against a plain threshold.

For each subset of ``bench_text`` (glosses + lemma names, the same 80/20 split and TF-IDF
settings), ``ConformalHierarchicalClassifier(make_pipeline(TfidfVectorizer(...),
HierarchicalClassifier(tree, semantics="terminal")))`` is fitted on the raw training texts:
20% of them (at most 2,000) are held out for calibration, and the vectorizer and the
classifier (defaults) are fitted on the rest, so the calibration rows reach the model as new
documents. On the held-out test rows, for each ``alpha``:

- ``conformal``: the calibrated cut-off for the miss loss (coverage >= 1 - alpha promised);
- ``conformal-distance``: the cut-off for the normalised tree distance (its mean <= alpha);
- ``threshold``: the classifier's ``decoding="threshold"`` at ``threshold = 1 - alpha`` (the
  deepest node whose subtree probability reaches it: no promise);
- ``most-probable``: the most probable answer (the start of the conformal walk), and
  ``predict``: the classifier's default answer (re-ranked by class prototypes); neither
  depends on alpha;
- ``conformal-prevectorized``: the wrapper around the classifier alone, on ``make_text``'s
  features, whose vectorizer saw the calibration rows too (the wrapper then shows them as new
  documents: without the features no training row has). One fit per alpha, same split; and
  ``conformal-prevectorized-raw``: the same calibration rows shown with those features.

Reported per answer: coverage (the answer is the true node or an ancestor of it), mean answer
depth in levels (0: the root, "anything"), the fraction of leaf answers and of answers as deep
as the label, and the mean normalised tree distance to the answer's subtree. The conformal
answers of the pipeline for all alphas come from one pass over the rows (the chains and their
subtree probabilities are computed once; the cut-off is what alpha changes), which gives
exactly what ``predict_node`` of a model calibrated for that alpha returns (checked).

``--timing``: instead, the cost of the conformal answers against the classifier's own
``predict`` on the same test rows, in one run: ``ConformalHierarchicalClassifier`` around the
classifier alone (``make_text``'s features, ``semantics="terminal"``, defaults otherwise) is
fitted once; then, alternately and ``--repeats`` times each, the classifier's ``predict``,
the wrapper's ``predict_node`` (the route along the most probable answer's path) and the
reference route (every node's subtree summed from ``predict_answer_proba``, then the same
walk), on ``--rows`` test rows. Reported: the median seconds of each, their ratios, whether
the two routes answered alike, and the load average.

Usage::

    python -m benchmarks.bench_conformal --subsets person,artifact \\
        --out benchmarks/results/bench_conformal.json --plot docs/_static/conformal.png
    python -m benchmarks.bench_conformal --subsets nouns --no-prevectorized \\
        --out benchmarks/results/bench_conformal_nouns.json
    python -m benchmarks.bench_conformal --timing --subsets artifact --rows 2000 \\
        --out benchmarks/results/bench_conformal_timing.json
    python -m benchmarks.bench_conformal --plot docs/_static/conformal.png \\
        --replot benchmarks/results/bench_conformal.json,benchmarks/results/bench_conformal_nouns.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_text import SUBSETS, make_text

ALPHAS = (0.05, 0.1, 0.2)


def describe(nodes: np.ndarray, truth: np.ndarray, tree: Any) -> dict[str, float]:
    """Coverage, depth, leaf and label-depth rates and tree-distance risk of answer node ids."""
    from hiclass_parallel.metrics import (
        conformal_risk,
        coverage_score,
        label_depth_answer_rate,
        leaf_answer_rate,
        mean_answer_depth,
    )

    kw = {"tree": tree, "input_type": "ids"}
    return {"coverage": coverage_score(truth, nodes, **kw), "mean_depth": mean_answer_depth(truth, nodes, **kw),
            "leaf_rate": leaf_answer_rate(truth, nodes, **kw),
            "label_depth_rate": label_depth_answer_rate(truth, nodes, **kw),
            "tree_distance_risk": conformal_risk(truth, nodes, loss="tree_distance", **kw)}


def raw_split(root: str | None, seed: int) -> dict[str, Any]:
    """``make_text``'s split of the glosses, as raw texts and node ids."""
    from sklearn.model_selection import train_test_split

    from hiclass_parallel.datasets import load_wordnet_glosses

    data = load_wordnet_glosses(root, pos="n", include_lemmas=True)
    ids = data.tree.to_ids(data.target)
    own = data.tree.to_ids(data.synsets)
    t_train, t_test, y_train, y_test, _, _ = train_test_split(data.data, ids, own, test_size=0.2, random_state=seed)
    return {"t_train": np.asarray(t_train, dtype=object), "t_test": np.asarray(t_test, dtype=object),
            "y_train": np.asarray(y_train), "y_test": np.asarray(y_test), "tree": data.tree}


def vectorizer() -> Any:
    """The TF-IDF of ``make_text``."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32)


def run_subset(name: str, seed: int, alphas: tuple[float, ...] = ALPHAS, params: dict[str, Any] | None = None,
               prevectorized: bool = True) -> dict[str, Any]:
    from sklearn.pipeline import make_pipeline

    from hiclass_parallel.estimators import ConformalHierarchicalClassifier, HierarchicalClassifier
    from hiclass_parallel.estimators.conformal import _answers_at, _chain_losses, conformal_cutoff
    from hiclass_parallel.metrics import miss_loss, tree_distance_loss

    data = raw_split(SUBSETS[name], seed)
    tree = data["tree"]
    labels = np.asarray(tree.labels, dtype=object)
    y_train, truth = labels[data["y_train"]], data["y_test"]

    def classifier() -> Any:
        return HierarchicalClassifier(tree, semantics="terminal", random_state=seed, **(params or {}))

    model = ConformalHierarchicalClassifier(make_pipeline(vectorizer(), classifier()), alpha=alphas[0],
                                            random_state=seed)
    start = time.perf_counter()
    model.fit(data["t_train"], y_train)
    fit_s = time.perf_counter() - start
    pipe, cal = model.estimator_, model.calibration_indices_
    clf = pipe[-1]
    X_test = pipe[:-1].transform(data["t_test"])
    start = time.perf_counter()
    cal_nodes, cal_mass = model._chains(pipe, data["t_train"][cal])
    nodes, mass = model._chains(clf, X_test)
    chains_s = time.perf_counter() - start
    cal_truth = data["y_train"][cal]
    most_probable = nodes[np.arange(len(nodes)), (nodes >= 0).sum(axis=1) - 1]
    out: dict[str, Any] = {
        "subset": name, "root": SUBSETS[name], "n_classes": tree.n_classes, "n_levels": tree.n_levels,
        "n_train": int(len(y_train) - len(cal)), "n_calibration": int(len(cal)), "n_test": int(len(truth)),
        "label_mean_depth": float((np.asarray(tree.depth)[truth] + 1).mean()),
        "fit_s": round(fit_s, 1), "chains_s": round(chains_s, 1),
        "most-probable": describe(most_probable, truth, tree),
        "predict": describe(clf.predict_node(X_test), truth, tree),
        "alphas": {},
    }
    for alpha in alphas:
        row: dict[str, Any] = {}
        for key, loss in (("conformal", miss_loss), ("conformal-distance", tree_distance_loss)):
            losses = _chain_losses(cal_nodes, cal_truth, tree, loss, 1.0)
            cutoff, cal_risk = conformal_cutoff(cal_mass, losses, alpha)
            row[key] = {"lambda": cutoff, "calibration_risk": cal_risk,
                        **describe(_answers_at(nodes, mass, cutoff), truth, tree)}
        clf.set_params(decoding="threshold", threshold=1 - alpha)
        row["threshold"] = describe(clf.predict_node(X_test), truth, tree)
        clf.set_params(decoding="best")
        out["alphas"][str(alpha)] = row
    # The shortcut above is the estimator's own predict: checked once per subset.
    cutoff = out["alphas"][str(alphas[0])]["conformal"]["lambda"]
    assert (model.predict_node(data["t_test"][:200]) == _answers_at(nodes[:200], mass[:200], cutoff)).all()
    if prevectorized:
        features = make_text(SUBSETS[name], seed)
        for alpha in alphas:
            other = ConformalHierarchicalClassifier(classifier(), alpha=alpha, random_state=seed)
            other.fit(features["X_train"], y_train)
            out["alphas"][str(alpha)]["conformal-prevectorized"] = {
                "lambda": other.lambda_, **describe(other.predict_node(features["X_test"]), truth, tree)}
            # The same calibration rows shown with the words only they have (no new-document view).
            rows = other.calibration_indices_
            raw_nodes, raw_mass = other._chains(other.estimator_, features["X_train"][rows])
            raw_losses = _chain_losses(raw_nodes, data["y_train"][rows], tree, miss_loss, 1.0)
            cutoff, _ = conformal_cutoff(raw_mass, raw_losses, alpha)
            pre_nodes, pre_mass = other._chains(other.estimator_, features["X_test"])
            out["alphas"][str(alpha)]["conformal-prevectorized-raw"] = {
                "lambda": cutoff, **describe(_answers_at(pre_nodes, pre_mass, cutoff), truth, tree)}
    out["load"] = os.getloadavg()
    return out


def run_timing(name: str, seed: int, rows: int, repeats: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Seconds of the classifier's ``predict`` and of the conformal answers by both routes."""
    from hiclass_parallel.estimators import ConformalHierarchicalClassifier, HierarchicalClassifier
    from hiclass_parallel.estimators.conformal import _answers_at

    data = make_text(SUBSETS[name], seed)
    tree = data["tree"]
    labels = np.asarray(tree.labels, dtype=object)
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=seed, **(params or {}))
    model = ConformalHierarchicalClassifier(clf, alpha=0.1, random_state=seed)
    start = time.perf_counter()
    model.fit(data["X_train"], labels[data["y_train"]])
    fit_s = time.perf_counter() - start
    fitted = model.estimator_
    X = data["X_test"][:rows]

    def reference() -> np.ndarray:  # every subtree summed, then the same walk
        return _answers_at(*model._chains(fitted, X, route="full"), model.lambda_)

    runs: dict[str, list[float]] = {"predict": [], "predict_node": [], "full_sums": []}
    answers: dict[str, np.ndarray] = {}
    load_before = os.getloadavg()
    for _ in range(repeats):  # alternated, so that a change of load touches all three alike
        for key, call in (("predict", lambda: fitted.predict(X)), ("predict_node", lambda: model.predict_node(X)),
                          ("full_sums", reference)):
            start = time.perf_counter()
            answers[key] = call()
            runs[key].append(time.perf_counter() - start)
    median = {key: float(np.median(v)) for key, v in runs.items()}
    return {"subset": name, "root": SUBSETS[name], "n_classes": tree.n_classes, "n_levels": tree.n_levels,
            "rows": int(X.shape[0]), "repeats": repeats, "fit_s": round(fit_s, 1), "lambda": model.lambda_,
            "seconds": runs, "median_s": median,
            "predict_node_over_predict": median["predict_node"] / median["predict"],
            "full_sums_over_predict": median["full_sums"] / median["predict"],
            "same_answers": int((answers["predict_node"] == answers["full_sums"]).sum()),
            "load": [load_before, os.getloadavg()]}


def table(results: list[dict[str, Any]]) -> str:
    """The markdown table of the performance page: coverage / mean depth per answer and alpha."""
    lines = ["| subset | alpha | conformal | conformal (tree distance: risk) | threshold 1 - alpha | most probable "
             "| conformal, features made before the split (as new documents / raw) |",
             "| --- | ---: | --- | --- | --- | --- | --- |"]
    for r in results:
        mp = r["most-probable"]
        for alpha, row in r["alphas"].items():
            c, d, t = row["conformal"], row["conformal-distance"], row["threshold"]
            p, q = row.get("conformal-prevectorized"), row.get("conformal-prevectorized-raw")
            pre = "" if p is None else f"{p['coverage']:.3f} / {p['mean_depth']:.2f}"
            pre += "" if q is None else f"; {q['coverage']:.3f} / {q['mean_depth']:.2f}"
            lines.append(
                f"| {r['root'] or 'all nouns'} | {alpha} | {c['coverage']:.3f} / {c['mean_depth']:.2f} | "
                f"{d['tree_distance_risk']:.3f} / {d['mean_depth']:.2f} | "
                f"{t['coverage']:.3f} / {t['mean_depth']:.2f} | "
                f"{mp['coverage']:.3f} / {mp['mean_depth']:.2f} | {pre} |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4.6))
    for i, r in enumerate(results):
        alphas = [float(a) for a in r["alphas"]]
        color = f"C{i}"
        for key, style, what in (("conformal", "-", "conformal"), ("threshold", "--", "threshold 1 - alpha")):
            left.plot(alphas, [r["alphas"][a][key]["coverage"] for a in r["alphas"]], ls=style, marker="o",
                      color=color, label=f"{r['subset']} {what}")
            right.plot(alphas, [r["alphas"][a][key]["mean_depth"] for a in r["alphas"]], ls=style, marker="o",
                       color=color, label=f"{r['subset']} {what}")
        right.axhline(r["most-probable"]["mean_depth"], color=color, ls=":", lw=1,
                      label=f"{r['subset']} most probable")
    grid = np.linspace(min(ALPHAS), max(ALPHAS), 2)
    left.plot(grid, 1 - grid, color="grey", lw=1, label="1 - alpha (promised)")
    left.set_xlabel("alpha")
    left.set_ylabel("coverage on held-out rows")
    right.set_xlabel("alpha")
    right.set_ylabel("mean answer depth (levels)")
    handles, names = right.get_legend_handles_labels()
    extra, extra_names = left.get_legend_handles_labels()
    fig.legend(handles + extra[-1:], names + extra_names[-1:], loc="lower center", ncol=4, fontsize=7)
    fig.suptitle("Conformal answers against a plain threshold (WordNet glosses, terminal labels)", fontsize=9)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_conformal", description=__doc__.split("\n\n")[0])
    p.add_argument("--subsets", default="person,artifact")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--params", default="{}", help="JSON: classifier parameters besides the defaults")
    p.add_argument("--no-prevectorized", action="store_true",
                   help="skip the wrapper on features made before the split (one classifier fit per alpha)")
    p.add_argument("--out", default=None, help="JSON report path")
    p.add_argument("--plot", default=None, help="coverage and depth against alpha (PNG; needs matplotlib)")
    p.add_argument("--replot", default=None,
                   help="draw --plot from these saved reports (comma-separated) instead of measuring")
    p.add_argument("--timing", action="store_true",
                   help="time the conformal answers (both routes) against predict instead (module docstring)")
    p.add_argument("--rows", type=int, default=2000, help="--timing: test rows timed")
    p.add_argument("--repeats", type=int, default=3, help="--timing: runs of each, alternated")
    args = p.parse_args(argv)
    if args.timing:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        report = {"date": time.strftime("%Y-%m-%d"), "uptime_at_start": uptime,
                  "command": "python -m benchmarks.bench_conformal " + " ".join(argv or sys.argv[1:]), "results": []}
        for name in args.subsets.split(","):
            r = run_timing(name, args.seed, args.rows, args.repeats, params=json.loads(args.params))
            report["results"].append(r)
            m = r["median_s"]
            print(f"{name} ({r['n_classes']:,} classes, {r['rows']:,} rows): predict {m['predict']:.3f} s, "
                  f"predict_node {m['predict_node']:.3f} s ({r['predict_node_over_predict']:.2f}x), full sums "
                  f"{m['full_sums']:.3f} s ({r['full_sums_over_predict']:.2f}x); same answers {r['same_answers']:,}"
                  f"/{r['rows']:,}; load {r['load'][0][0]:.1f} -> {r['load'][1][0]:.1f}", flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(report, indent=1))
        return report["results"]
    if args.replot:
        results = [r for path in args.replot.split(",") for r in json.loads(Path(path).read_text())["results"]]
    else:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "uptime_at_start": uptime,
                                  "command": "python -m benchmarks.bench_conformal " + " ".join(argv or sys.argv[1:]),
                                  "results": []}
        results = report["results"]
        for name in args.subsets.split(","):
            r = run_subset(name, args.seed, params=json.loads(args.params), prevectorized=not args.no_prevectorized)
            results.append(r)
            for alpha, row in r["alphas"].items():
                print(f"{name} alpha={alpha}: " + ", ".join(
                    f"{key} {row[key]['coverage']:.3f}/{row[key]['mean_depth']:.2f}" for key in row)
                    + f"; most probable {r['most-probable']['coverage']:.3f}/{r['most-probable']['mean_depth']:.2f}",
                    flush=True)
            print(f"{name}: fit {r['fit_s']} s, chains {r['chains_s']} s, load {r['load'][0]:.1f}", flush=True)
            if args.out:  # written after each subset: a long run keeps what it measured
                report["uptime_at_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
                Path(args.out).write_text(json.dumps(report, indent=1))
        print(table(results))
    if args.plot:
        try:
            plot(results, args.plot)
        except ImportError:
            print("matplotlib is not installed: no plot", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
