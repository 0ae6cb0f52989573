"""The answer at predict time is decided in one dispatcher (prediction/_decode.decode), which
reports the route it took: model paths -> re-ranking -> decoding rule -> output form."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier
from hiclass_parallel.estimators.prediction import _predict
from hiclass_parallel.estimators.prediction._decode import Route


@pytest.fixture(scope="module")
def fitted():
    X, y, tree = make_hierarchical_classification(n_samples=200, n_features=10, branching=3, depth=2, random_state=0)
    X = X.astype(np.float32)
    models = {}
    for prototypes in (None, "auto", 0.5):
        models[prototypes] = HierarchicalClassifier(tree, max_epochs=2, random_state=0, module__hidden_units=8,
                                                    prototypes=prototypes, calibration=None).fit(X, y)
    full = HierarchicalClassifier(tree, max_epochs=2, random_state=0, module__hidden_units=8, training="full",
                                  prototypes=None, calibration=None).fit(X, y)
    return X, models, full


def _routes(monkeypatch):
    routes = []
    real = _predict.decode

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        routes.append(out.route)
        return out

    monkeypatch.setattr(_predict, "decode", spy)
    return routes


@pytest.mark.parametrize("prototypes", [None, "auto", 0.5])
@pytest.mark.parametrize("decoding", ["best", "threshold", "hf1"])
def test_the_dispatcher_reports_the_route_predict_took(fitted, monkeypatch, prototypes, decoding):
    X, models, _ = fitted
    clf = models[prototypes].set_params(decoding=decoding, top_k=3, prototype_candidates=4)
    routes = _routes(monkeypatch)
    clf.predict(X[:7])
    clf.predict_top_k(X[:7], k=2)
    reranks = prototypes is not None
    model = "exhaustive" if decoding == "threshold" else "best_first"  # threshold decoding reads every score
    one = {  # (paths per row from the model, re-ranking) of the one answer, by rule
        "best": (4 if reranks else None, "prototypes" if reranks else None),
        "threshold": (None, None),  # prototypes never re-rank threshold decoding
        "hf1": (4 if reranks else 3, "prototypes" if reranks else None),  # max(top_k, prototype_candidates)
    }[decoding]
    assert routes[0] == Route(model, one[0], one[1], decoding, "path")
    assert routes[1] == Route(model, 4 if reranks else 2, "prototypes" if reranks else None, "top_k", "top_k")
    assert len(routes) == 2  # each answer decoded once


def test_a_fully_trained_model_decodes_exhaustively_and_predict_is_the_dispatchers_answer(fitted, monkeypatch):
    from hiclass_parallel.estimators.prediction._decode import decode

    X, models, full = fitted
    routes = _routes(monkeypatch)
    ids = full.predict_node(X[:7])
    assert routes == [Route("exhaustive", None, None, "best", "path")]
    paths, _, route = decode(full._decoder(), X[:7])
    assert route == routes[0]
    np.testing.assert_array_equal(paths[np.arange(7), (paths >= 0).sum(1) - 1], ids)
    # sparse rows of a dense model go through the same dispatcher
    assert decode(models[None]._decoder(), sp.csr_matrix(X[:3])).route.model == "best_first"
