"""The classes' own names through the Pipeline's vectorizer: ClassTextClassifier
=============================================================================

Hypernym placement on a WordNet subtree from glosses with lemma names. The classes' names
(a synset's lemma names, "toy dog, toy") are evidence for them, but a plain
``make_pipeline(TfidfVectorizer(), HierarchicalClassifier(tree))`` has no place for them:
``module__class_features`` must come from the fitted vectorizer, which the classifier never
sees. ``ClassTextClassifier(vectorizer, classifier, class_text)`` takes the names as a mapping
label -> text and, at every fit, fits the vectorizer on that fit's rows and passes the names
through it to the classifier. ``cross_validate`` below shows that each fold's vocabulary comes
from its own training rows; the held-out split compares the plain pipeline with the new route.

As in ``benchmarks/bench_text.py``, the held-out synsets' own names stay out of the class
texts (a real taxonomy would not hold the new items yet); the classes the mapping does not
name get no text (``missing_text="empty"``).

Run: ``python examples/class_text_pipeline.py`` (``--root dog.n.01 --epochs 3`` for a quick run)
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import KFold, cross_validate, train_test_split
from sklearn.pipeline import make_pipeline

from hiclass_parallel.datasets import load_wordnet_glosses
from hiclass_parallel.estimators import ClassTextClassifier, HierarchicalClassifier
from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_f1_score


def main(root: str = "mammal.n.01", epochs: int | None = None, cv: int = 3, seed: int = 0) -> dict:
    print(f"loading WordNet glosses under {root} ...", flush=True)
    data = load_wordnet_glosses(root, include_lemmas=True)
    tree = data.tree
    X_train, X_test, y_train, y_test, own_train, _ = train_test_split(
        list(data.data), data.target, data.synsets, test_size=0.2, random_state=seed)
    # label -> text: the lemma names of the training synsets ("pooch, doggie, ...: informal ...")
    names = {synset: text.split(": ", 1)[0] for synset, text in zip(own_train, X_train)}
    for root_id in np.flatnonzero(np.asarray(tree.parents) < 0):
        label = tree.labels[root_id]
        names[label] = str(label).split(".")[0].replace("_", " ")

    def vectorizer():
        return TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32)

    def classifier():
        return HierarchicalClassifier(tree, semantics="terminal", max_epochs=epochs, random_state=seed)

    routes = {"plain pipeline": make_pipeline(vectorizer(), classifier()),
              "ClassTextClassifier": ClassTextClassifier(vectorizer(), classifier(), class_text=names)}

    print(f"training: {cv} folds of {len(X_train)} synsets with class text ...", flush=True)
    folds = KFold(cv, shuffle=True, random_state=seed)
    out = cross_validate(routes["ClassTextClassifier"], np.asarray(X_train, dtype=object), y_train, cv=folds,
                         return_estimator=True)
    vocabularies = [len(est.vectorizer_.vocabulary_) for est in out["estimator"]]
    print(f"cross-validated hF1 {out['test_score'].mean():.3f}; each fold's own vocabulary: {vocabularies} words",
          flush=True)

    print(f"evaluating on {len(X_test)} held-out synsets ...", flush=True)
    result = {"cv_hf1": float(out["test_score"].mean()), "fold_vocabularies": vocabularies}
    for name, model in routes.items():
        pred = model.fit(X_train, y_train).predict(X_test)
        scores = {"hf1": float(hierarchical_f1_score(y_test, pred, tree=tree)),
                  "exact": float(exact_path_accuracy_score(y_test, pred, tree))}
        print(f"{name:>20}: hF1 {scores['hf1']:.3f}, exact accuracy {scores['exact']:.3f}")
        result[name] = scores
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="mammal.n.01")
    parser.add_argument("--epochs", type=int, default=None)
    main(**vars(parser.parse_args()))
