"""Experiment: options for sentence embeddings on the default route (hidden width, prototype kind).

Fits the defaults (``semantics="terminal"``) on the all-MiniLM-L6-v2 embeddings of a WordNet
subtree's glosses (``bench_dense_route.embedding_split``, cached in ``/tmp/hc_embeddings``) with
one change per variant: ``dense`` (none), ``csr`` (the rows as a sparse matrix: cosine
prototypes instead of Gaussian ones), ``noproto`` (``prototypes=None``), ``h<N>``
(``module__hidden_units=N``), ``noflat`` (``flat_term=None``), ``flat<W>`` (``flat_term=W``).

Usage::

    python -m benchmarks.explore_embedding_options person.n.01,artifact.n.01,mammal.n.01 dense,csr,h512
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(roots: list[str], variants: list[str], cache: Path = Path("/tmp/hc_embeddings")) -> None:
    """Print hF1, exact accuracy, fit seconds and the prototypes' kind and weight per fit."""
    import torch

    from benchmarks.bench_dense_route import embedding_split
    from hiclass_parallel.estimators import HierarchicalClassifier
    from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_f1_score

    torch.set_num_threads(2)
    for root in roots:
        data = embedding_split(root, cache)
        for variant in variants:
            X_train, X_test = data["X_train"].astype(np.float32), data["X_test"].astype(np.float32)
            params: dict = {"semantics": "terminal", "random_state": 0}
            if variant == "csr":
                X_train, X_test = sp.csr_matrix(X_train), sp.csr_matrix(X_test)
            elif variant == "noproto":
                params["prototypes"] = None
            elif variant == "noflat":
                params["flat_term"] = None
            elif variant.startswith("flat"):
                params["flat_term"] = float(variant[4:])
            elif variant.startswith("h"):
                params["module__hidden_units"] = int(variant[1:])
            clf = HierarchicalClassifier(data["tree"], **params)
            start = time.perf_counter()
            clf.fit(X_train, data["y_train"])
            fit_s = time.perf_counter() - start
            pred = clf.predict(X_test)
            hf1 = hierarchical_f1_score(data["y_test"], pred, data["tree"])
            exact = exact_path_accuracy_score(data["y_test"], pred, data["tree"])
            answer = clf.answer_
            print(f"{root} {variant}: hF1 {hf1:.3f} exact {exact:.3f} fit {fit_s:.1f}s "
                  f"prototypes {type(answer.term('prototypes')).__name__} weight {answer.weight('prototypes'):g} "
                  f"flat {answer.weight('flat_term'):g}", flush=True)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    run(sys.argv[1].split(","), sys.argv[2].split(","))
