"""Every hypernym as a label: the multi-label DAG classifier against one-vs-rest LinearSVC.

Task: WordNet 3.0 hypernym placement where a synset's target is the set of *all* its
hypernyms (``load_wordnet_glosses(root, include_lemmas=True, hypernyms="all")``: most synsets
have one, some two or more) in the DAG of every hypernym pointer. 80/20 split (seed 0), one
``TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2))`` fitted on the training texts for
every method. Methods, in one process, one after the other:

- **hc-multilabel**: ``MultiLabelHierarchicalClassifier(dag, semantics="terminal")``, nothing
  else set (``SparseMLP``, path-local DAG loss, ``threshold=0.5``, ``top_k=5``);
- **hc-multilabel-classtext**: the same plus ``module__class_features``: the lemma names of
  every class, TF-IDF encoded like ``X``, except the classes whose synset is a held-out row
  (as ``bench_text``'s ``hc-text-classtext``; each copy of a DAG class reads the class's row);
- **ovr-linear-svc**: ``OneVsRestClassifier(LinearSVC())`` on the ``MultiLabelBinarizer``
  indicator of the training label sets (one binary LinearSVC per label seen in training);
  a sample whose decision values are all negative gets its highest-scoring label (without
  that fallback such rows predict nothing; both are reported).

Scores: multi-label hierarchical P/R/F1 on the DAG (a sample's node set is the union of its
labels' ancestors through every parent; micro), exact set accuracy (predicted label set ==
true set), and hF1 on the test rows with two or more labels. Times are wall-clock seconds
with ``OMP_NUM_THREADS`` threads; the load average is recorded at the start and end.

Usage: ``python -m benchmarks.bench_multilabel [--subsets person animal] [--methods hc-multilabel]
[--out benchmarks/results/bench_multilabel.json]`` (``--methods``: some of the three; all by default;
``--subsets nouns`` is every noun, where one-vs-rest trains one model per label seen).
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

SUBSETS = {"animal": "animal.n.01", "person": "person.n.01", "artifact": "artifact.n.01", "nouns": None}


def load(root: str | None, seed: int) -> dict[str, Any]:
    """Texts, label sets and the DAG of the subset, split and TF-IDF encoded."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split

    from hiclass_parallel.datasets import load_wordnet_glosses

    data = load_wordnet_glosses(root, include_lemmas=True, hypernyms="all")
    dag = data.dag
    own = dag.to_ids(data.synsets)
    t_train, t_test, y_train, y_test, own_train, _ = train_test_split(
        data.data, list(data.target), own, test_size=0.2, random_state=seed)
    vec = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32)
    X_train = vec.fit_transform(t_train).tocsr()
    # Class text, as bench_text's: a class's lemma names, for the classes that are no held-out
    # row's synset; a class without a row (a root) gets its label's lemma.
    names = [""] * dag.n_nodes
    for node, text in zip(own_train, t_train):
        names[node] = text.split(": ", 1)[0]
    has_row = np.zeros(dag.n_nodes, dtype=bool)
    has_row[own] = True
    for node in np.flatnonzero(~has_row):
        names[node] = str(dag.labels[node]).split(".")[0].replace("_", " ")
    return {"X_train": X_train, "X_test": vec.transform(t_test).tocsr(),
            "y_train": [list(t) for t in y_train], "y_test": [list(t) for t in y_test], "dag": dag,
            "class_features": vec.transform(names).tocsr()}


def scores(dag: Any, y_true: list, y_pred: list) -> dict[str, float]:
    from hiclass_parallel.metrics import (
        hierarchical_f1_score_dag,
        hierarchical_precision_score_dag,
        hierarchical_recall_score_dag,
    )

    kw = {"zero_division": 0.0}
    several = [i for i, t in enumerate(y_true) if len(t) > 1]
    return {
        "hp": float(hierarchical_precision_score_dag(y_true, y_pred, dag, **kw)),
        "hr": float(hierarchical_recall_score_dag(y_true, y_pred, dag, **kw)),
        "hf1": float(hierarchical_f1_score_dag(y_true, y_pred, dag, **kw)),
        "exact_set": float(np.mean([set(t) == set(p) for t, p in zip(y_true, y_pred)])),
        "hf1_several": float(hierarchical_f1_score_dag([y_true[i] for i in several], [y_pred[i] for i in several],
                                                       dag, **kw)) if several else float("nan"),
        "labels_per_row": float(np.mean([len(p) for p in y_pred])),
    }


def run_ours(data: dict[str, Any], seed: int, class_text: bool = False) -> dict[str, Any]:
    from hiclass_parallel.estimators import MultiLabelHierarchicalClassifier

    extra = {"module__class_features": data["class_features"]} if class_text else {}
    clf = MultiLabelHierarchicalClassifier(data["dag"], semantics="terminal", random_state=seed, **extra)
    start = time.perf_counter()
    clf.fit(data["X_train"], data["y_train"])
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    pred = [list(p) for p in clf.predict(data["X_test"])]
    predict_s = time.perf_counter() - start
    return {"fit_s": fit_s, "predict_s": predict_s, "epochs": len(clf.net_.history),
            **scores(data["dag"], data["y_test"], pred)}


def run_ovr(data: dict[str, Any], seed: int) -> dict[str, Any]:
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.preprocessing import MultiLabelBinarizer
    from sklearn.svm import LinearSVC

    binarizer = MultiLabelBinarizer(sparse_output=True)
    Y = binarizer.fit_transform(data["y_train"])
    clf = OneVsRestClassifier(LinearSVC(random_state=seed))
    start = time.perf_counter()
    clf.fit(data["X_train"], Y)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    decision = clf.decision_function(data["X_test"])
    positive = decision > 0
    best = decision.argmax(axis=1)
    predict_s = time.perf_counter() - start
    labels = binarizer.classes_
    plain = [labels[np.flatnonzero(row)].tolist() for row in positive]
    fallback = [p if p else [labels[b]] for p, b in zip(plain, best)]
    out = {"fit_s": fit_s, "predict_s": predict_s, "n_binary_models": int(Y.shape[1])}
    out.update(scores(data["dag"], data["y_test"], fallback))
    out["without_fallback"] = scores(data["dag"], data["y_test"], plain)
    return out


def run_ours_classtext(data: dict[str, Any], seed: int) -> dict[str, Any]:
    return run_ours(data, seed, class_text=True)


METHODS = {"ovr-linear-svc": run_ovr, "hc-multilabel": run_ours, "hc-multilabel-classtext": run_ours_classtext}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subsets", nargs="+", default=["animal", "person"], choices=sorted(SUBSETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    torch.set_num_threads(args.threads)
    report: dict[str, Any] = {"threads": args.threads, "subsets": {}}
    for name in args.subsets:
        load_start = os.getloadavg()[0]
        data = load(SUBSETS[name], args.seed)
        info = {
            "n_classes": int(data["dag"].n_nodes),
            "n_unrolled": int(data["dag"].n_unrolled()),
            "n_train": int(data["X_train"].shape[0]),
            "n_test": int(data["X_test"].shape[0]),
            "n_features": int(data["X_train"].shape[1]),
            "test_rows_with_several_labels": int(sum(len(t) > 1 for t in data["y_test"])),
            "load_average_start": load_start,
        }
        print(f"{name}: {info}", flush=True)
        results = {}
        for method in args.methods:
            results[method] = METHODS[method](data, args.seed)
            print(f"  {method}: " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                                            for k, v in results[method].items() if k != "without_fallback"),
                  flush=True)
        info["load_average_end"] = os.getloadavg()[0]
        for method in ("hc-multilabel", "hc-multilabel-classtext"):
            if method in results and "ovr-linear-svc" in results:
                info[f"fit_ratio_{method}"] = results[method]["fit_s"] / results["ovr-linear-svc"]["fit_s"]
        report["subsets"][name] = {**info, "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
