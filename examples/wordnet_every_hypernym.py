"""Every hypernym as a label: multi-label placement in WordNet's DAG, against one-vs-rest LinearSVC
================================================================================================

WordNet gives some synsets several hypernyms (``person.n.01`` is an ``organism.n.01`` and a
``causal_agent.n.01``). Here the target of a gloss is the set of all its synset's hypernyms, in
the DAG of every hypernym pointer, and one network over the whole DAG
(``MultiLabelHierarchicalClassifier``) is compared with a flat one-vs-rest linear model on the
same TF-IDF features, by hierarchical F1 with ancestors taken through every parent.

Run: ``python examples/wordnet_every_hypernym.py [root]`` (default ``animal.n.01``, about a
minute on two cores).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import train_test_split
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MultiLabelBinarizer
from sklearn.svm import LinearSVC

from hiclass_parallel.datasets import load_wordnet_glosses
from hiclass_parallel.estimators import MultiLabelHierarchicalClassifier
from hiclass_parallel.metrics import hierarchical_f1_score_dag


def main(root: str = "animal.n.01", epochs: int | None = None, seed: int = 0) -> dict:
    # flush=True: each stage shows at once, also when the output goes to a pipe or a log
    print(f"loading WordNet glosses under {root}, every hypernym ...", flush=True)
    data = load_wordnet_glosses(root, include_lemmas=True, hypernyms="all")
    dag = data.dag  # a Dag: every hypernym pointer inside the subset
    several = sum(len(t) > 1 for t in data.target)
    print(f"{root}: {len(data.data)} glosses, {dag.n_nodes} classes ({dag.n_unrolled()} once unrolled), "
          f"{several} glosses with several hypernyms", flush=True)
    X_train, X_test, y_train, y_test = train_test_split(
        data.data, [list(t) for t in data.target], test_size=0.2, random_state=seed
    )

    ours = make_pipeline(
        TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2)),
        MultiLabelHierarchicalClassifier(dag, semantics="terminal", max_epochs=epochs, random_state=seed),
    )
    print(f"training MultiLabelHierarchicalClassifier on {len(X_train)} glosses ...", flush=True)
    start = time.perf_counter()
    ours.fit(X_train, y_train)
    ours_s = time.perf_counter() - start
    pred = [list(p) for p in ours.predict(X_test)]

    binarizer = MultiLabelBinarizer().fit(y_train)
    flat = make_pipeline(TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2)),
                         OneVsRestClassifier(LinearSVC(random_state=seed)))
    print(f"training one-vs-rest LinearSVC over {len(binarizer.classes_)} labels ...", flush=True)
    start = time.perf_counter()
    flat.fit(X_train, binarizer.transform(y_train))
    flat_s = time.perf_counter() - start
    print(f"evaluating both on {len(X_test)} held-out glosses ...", flush=True)
    decision = flat.decision_function(X_test)
    # a row with no positive decision gets its best label (else it predicts nothing)
    flat_pred = [binarizer.classes_[np.flatnonzero(row > 0)].tolist() or [binarizer.classes_[row.argmax()]]
                 for row in decision]

    result = {
        "hf1": float(hierarchical_f1_score_dag(y_test, pred, dag)),
        "hf1_ovr": float(hierarchical_f1_score_dag(y_test, flat_pred, dag)),
        "fit_s": ours_s,
        "fit_s_ovr": flat_s,
    }
    print(f"MultiLabelHierarchicalClassifier: hF1 {result['hf1']:.3f}, fit {ours_s:.1f} s", flush=True)
    print(f"one-vs-rest LinearSVC:            hF1 {result['hf1_ovr']:.3f}, fit {flat_s:.1f} s", flush=True)
    for text, true, guess in list(zip(X_test, y_test, pred))[:3]:
        print(f"  {text[:60]!r}...\n    true {true}, predicted {guess}")
    return result


if __name__ == "__main__":
    main(*sys.argv[1:2])
