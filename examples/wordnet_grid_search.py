"""WordNet glosses with GridSearchCV and a hierarchical scorer
===========================================================

Hypernym placement on a WordNet subtree: TF-IDF of each synset's gloss into a
HierarchicalClassifier, tuned with GridSearchCV on hierarchical F1 (the scorer object
``get_scorer("hierarchical_f1")``), then evaluated on held-out synsets with the hierarchical report.

Run: ``python examples/wordnet_grid_search.py`` (``--root dog.n.01 --epochs 3`` for a quick run)
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import Pipeline

from hiclass_parallel import HierarchicalClassifier
from hiclass_parallel.datasets import load_wordnet_glosses
from hiclass_parallel.metrics import (
    get_scorer,
    hierarchical_classification_report,
    hierarchical_f1_score,
)


def main(root: str = "mammal.n.01", epochs: int = 15, cv: int = 3, seed: int = 0) -> dict:
    # flush=True: each stage shows at once, also when the output goes to a pipe or a log
    print(f"loading WordNet glosses under {root} ...", flush=True)
    data = load_wordnet_glosses(root, pos=None, include_lemmas=True)
    X_train, X_test, y_train, y_test = train_test_split(data.data, data.target, test_size=0.2, random_state=seed)
    pipe = Pipeline([
        ("tfidf", TfidfVectorizer(sublinear_tf=True, dtype=np.float32)),
        ("clf", HierarchicalClassifier(data.tree, semantics="terminal", max_epochs=epochs, random_state=seed)),
    ])
    grid = {"clf__lr": [3e-3, 1e-2], "clf__module__hidden_units": [128, 256]}
    search = GridSearchCV(pipe, grid, scoring=get_scorer("hierarchical_f1"), cv=cv, n_jobs=1)
    n_settings = len(grid["clf__lr"]) * len(grid["clf__module__hidden_units"])
    print(f"training: {n_settings} settings x {cv} folds of {len(X_train)} synsets, {epochs} epochs each, "
          "then a refit of the best ...", flush=True)
    search.fit(X_train, y_train)
    print(f"{len(data.data)} synsets under {root}; best {search.best_params_}, CV hF1 {search.best_score_:.3f}",
          flush=True)
    print(f"evaluating on {len(X_test)} held-out synsets ...", flush=True)
    pred = search.predict(X_test)
    h_f1 = hierarchical_f1_score(y_test, pred, tree=data.tree)
    print(hierarchical_classification_report(y_test, pred, data.tree, zero_division=0.0))
    print(f"held-out hierarchical F1: {h_f1:.3f}")
    return {"best_params": search.best_params_, "cv_score": search.best_score_, "test_hf1": h_f1}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="mammal.n.01")
    parser.add_argument("--epochs", type=int, default=15)
    main(**vars(parser.parse_args()))
