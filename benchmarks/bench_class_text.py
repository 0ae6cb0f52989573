"""Class text through the Pipeline route (``ClassTextClassifier``) vs the plain pipeline.

One WordNet subset (default person.n.01), glosses with lemma names, split 80/20 as in
``bench_text.make_text`` (seed 0); the class texts are the lemma names of every class whose
synset is a training row, and the roots' label names, as ``make_text`` builds them (held-out
items' names stay out). Three fits on raw text, each in this process, one after another:

- ``plain``: ``make_pipeline(TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2)),
  HierarchicalClassifier(tree, semantics="terminal", random_state=0))``;
- ``class-text``: ``ClassTextClassifier`` of the same two, the vectorizer fitted on X only;
- ``class-text-fit-on-text``: the same with ``fit_vectorizer_on_class_text=True``.

Reported: fit s, hierarchical F1 (micro), exact accuracy, and the load average before and
after. ``OMP_WAIT_POLICY=PASSIVE`` is set before torch starts (see DESIGN.md, shared cores).

Usage::

    python -m benchmarks.bench_class_text --root person.n.01
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def class_texts(data, own_train, t_train) -> dict:
    """Lemma names of the classes that are a training row's synset; roots by their label's name."""
    labels = data.tree.labels
    names = {labels[node]: text.split(": ", 1)[0] for node, text in zip(own_train, t_train)}
    for root in np.flatnonzero(np.asarray(data.tree.parents) < 0):
        names[labels[root]] = str(labels[root]).split(".")[0].replace("_", " ")
    return names


def main(argv: list[str] | None = None) -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline

    from benchmarks.bench_peers import score
    from hiclass_parallel.datasets import load_wordnet_glosses
    from hiclass_parallel.estimators import ClassTextClassifier, HierarchicalClassifier

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="person.n.01")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    data = load_wordnet_glosses(args.root, include_lemmas=True)
    tree = data.tree
    own = tree.to_ids(data.synsets)
    t_train, t_test, y_train, y_test, own_train, _ = train_test_split(
        list(data.data), np.asarray(data.target), own, test_size=0.2, random_state=args.seed)
    names = class_texts(data, own_train, t_train)

    def vec():
        return TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32)

    def clf():
        return HierarchicalClassifier(tree, semantics="terminal", random_state=0)

    routes = {
        "plain": make_pipeline(vec(), clf()),
        "class-text": ClassTextClassifier(vec(), clf(), names),
        "class-text-fit-on-text": ClassTextClassifier(vec(), clf(), names, fit_vectorizer_on_class_text=True),
    }
    report = {"root": args.root, "n_classes": tree.n_classes, "n_train": len(t_train), "n_test": len(t_test),
              "n_class_texts": len(names), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "routes": {}}
    true_ids = tree.to_ids(y_test)
    for name, model in routes.items():
        load_before = os.getloadavg()
        start = time.perf_counter()
        model.fit(t_train, y_train)
        fit_s = time.perf_counter() - start
        nodes = model.predict_node(t_test) if hasattr(model, "predict_node") else model[-1].predict_node(
            model[0].transform(t_test))
        pred_paths = np.asarray(tree.paths, dtype=np.int64)[nodes]
        out = {"fit_s": round(fit_s, 2), **{k: round(v, 4) for k, v in score(tree, true_ids, pred_paths).items()},
               "loadavg_before": [round(x, 2) for x in load_before],
               "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
        report["routes"][name] = out
        print(name, json.dumps(out), flush=True)
    return report


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
