"""The answer model as one fitted attribute (``answer_``): for fixed weights, predict, save, load and
export give the answers recorded before the terms and the calibrator moved into it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from hiclass_parallel.estimators import HierarchicalClassifier, serving_module
from hiclass_parallel.estimators.fitting import _costs
from hiclass_parallel.estimators.io._persistence import load_classifier, save_classifier
from support import text_like

# Recorded on the code before the move (prototypes_, flat_term_, calibrator_ as three attributes):
# each case's first 40 rows' answer (node id), its three best answers (the last label of each
# path) and its calibrated confidence (5 decimals).
RECORDED = {
    'sparse': dict(
        node=[31, 20, 14, 3, 17, 30, 7, 31, 28, 35, 32, 27, 21, 30, 24, 1, 19, 30, 21, 0, 21, 9, 19, 27, 19, 11, 34, 10, 28, 2, 33, 13, 11, 18, 3, 34, 14, 15, 20, 25],
        top=[["c2.0.1", "c2.2.0", "c2.0.0"], ["c0.2.2", "c0.0", "c0.1.2"], ["c0.0.2", "c0", "c0.2.0"], ["c0.0", "c2.0.2", "c0.1"], ["c0.1.2", "c0.2.0", "c0.1"], ["c2.0.0", "c1.1.1", "c1.1"], ["c1.1", "c2.1.1", "c2"], ["c2.0.1", "c2.2.0", "c2.0.0"], ["c1.2.1", "c1.1.1", "c1.1.2"], ["c2.1.2", "c2.1", "c0.2.1"], ["c2.0.2", "c2.0.1", "c2.2"], ["c1.2.0", "c1.2.1", "c1.0.0"], ["c1.0.0", "c1.1.1", "c1.2.0"], ["c2.0.0", "c2.0.2", "c2.0.1"], ["c1.1.0", "c2.0.2", "c2.0.0"], ["c1", "c1.1", "c1.0"], ["c0.2.1", "c1.0.0", "c0.2.2"], ["c2.0.0", "c2.2.0", "c1.0"], ["c1.0.0", "c2.1.1", "c1.1.0"], ["c0", "c0.2.2", "c0.1.2"], ["c1.0.0", "c2.1.1", "c2.2"], ["c2.0", "c2.0.1", "c0.1.0"], ["c0.2.1", "c1.2", "c2.1.2"], ["c1.2.0", "c1.1.0", "c1.2.2"], ["c0.2.1", "c2.0.1", "c2.0"], ["c2.2", "c2.0.2", "c0"], ["c2.1.1", "c2.1.0", "c2.0"], ["c2.1", "c1.0.2", "c2.2.0"], ["c1.2.1", "c2.2", "c2.1.0"], ["c2", "c1.0.2", "c2.0"], ["c2.1.0", "c2.0", "c2.0.0"], ["c0.0.1", "c0", "c0.1.0"], ["c2.2", "c2.1.2", "c2.1.0"], ["c0.2.0", "c0.0.2", "c0.0.1"], ["c0.0", "c0", "c0.2.2"], ["c2.1.1", "c2.2", "c2.2.0"], ["c0.0.2", "c1.2.0", "c0.0.0"], ["c0.1.0", "c2.1.1", "c0.2.0"], ["c0.2.2", "c0.1", "c0.2"], ["c1.1.1", "c2.1", "c2.2.2"]],
        confidence=[0.15688, 0.13698, 0.13139, 0.08525, 0.10172, 0.07697, 0.09646, 0.08621, 0.11414, 0.08281, 0.15221, 0.12213, 0.16541, 0.17115, 0.07605, 0.1106, 0.14854, 0.12628, 0.07888, 0.11315, 0.10785, 0.14609, 0.07982, 0.20722, 0.06521, 0.12516, 0.10018, 0.05681, 0.10318, 0.1188, 0.08814, 0.15371, 0.10199, 0.10732, 0.11086, 0.1488, 0.11748, 0.09176, 0.12467, 0.06791],
    ),
    'dense': dict(
        node=[31, 20, 18, 0, 36, 30, 7, 34, 28, 35, 32, 27, 21, 30, 24, 7, 19, 36, 21, 21, 21, 9, 19, 27, 31, 0, 34, 33, 28, 2, 38, 13, 11, 18, 21, 34, 14, 34, 20, 8],
        top=[["c2.0.1", "c2.2.0", "c2.0.0"], ["c0.2.2", "c0.0", "c0.0.0"], ["c0.2.0", "c0.0.2", "c0.0.0"], ["c0", "c2.0.0", "c2.0.2"], ["c2.2.0", "c0.2.0", "c2"], ["c2.0.0", "c1.0.2", "c1.2.2"], ["c1.1", "c2", "c2.1.1"], ["c2.1.1", "c1.2.0", "c2"], ["c1.2.1", "c1.1.1", "c1.2"], ["c2.1.2", "c0.2.1", "c2.1.0"], ["c2.0.2", "c2.0.1", "c2.2.0"], ["c1.2.0", "c1.2.1", "c1.2"], ["c1.0.0", "c1.1.1", "c1.0"], ["c2.0.0", "c2.0.2", "c2.2.1"], ["c1.1.0", "c2.0.2", "c2.0.0"], ["c1.1", "c1", "c2.2.0"], ["c0.2.1", "c0.0.0", "c1.0.0"], ["c2.2.0", "c2.0.0", "c1.1"], ["c1.0.0", "c2.1.1", "c1.1.0"], ["c1.0.0", "c0", "c0.1.2"], ["c1.0.0", "c2.1.1", "c2"], ["c2.0", "c0.0.1", "c2.1.1"], ["c0.2.1", "c1.2", "c2.1.0"], ["c1.2.0", "c1.1.0", "c0.1.1"], ["c2.0.1", "c0.2.1", "c2.0"], ["c0", "c2.0.2", "c2.0.0"], ["c2.1.1", "c2.2.1", "c2.0"], ["c2.1.0", "c2.2.1", "c2.2.0"], ["c1.2.1", "c2.2.0", "c0"], ["c2", "c2.0", "c2.1.1"], ["c2.2.2", "c2.1.1", "c2.0"], ["c0.0.1", "c0", "c0.1.0"], ["c2.2", "c0.2.1", "c2.2.1"], ["c0.2.0", "c0.0.1", "c2.2.1"], ["c1.0.0", "c0.0", "c2.2.1"], ["c2.1.1", "c2.1.0", "c2"], ["c0.0.2", "c0.0.0", "c1"], ["c2.1.1", "c0.2.0", "c0.1.0"], ["c0.2.2", "c1.2.1", "c1.0.0"], ["c1.2", "c2.2.0", "c1.1.1"]],
        confidence=[0.12464, 0.22119, 0.10081, 0.06746, 0.06068, 0.162, 0.04533, 0.08367, 0.98659, 0.04143, 0.38015, 0.15934, 0.23052, 0.33003, 0.04834, 0.05862, 0.04012, 0.08983, 0.15283, 0.05382, 0.11084, 0.19356, 0.04839, 0.19364, 0.06094, 0.05393, 0.11396, 0.06716, 0.08958, 0.08623, 0.03549, 0.15112, 0.04419, 0.0842, 0.06117, 0.15089, 0.04114, 0.06629, 0.05531, 0.05444],
    ),
}


def _case(name):
    X, y, tree = text_like(n_samples=400, n_features=40, seed=3)
    params = dict(prototypes=8.0, flat_term=4.0, calibration="beta", calibration_size=60)
    if name == "dense":
        rng = np.random.default_rng(1)
        X = (np.asarray(X.todense()) + rng.normal(scale=0.05, size=X.shape).astype(np.float32)).astype(np.float32)
        params = dict(prototypes=1.0, flat_term=2.0, calibration="beta", calibration_size=60)
    with warnings.catch_warnings(), pytest.MonkeyPatch.context() as patch:
        warnings.simplefilter("ignore")
        # The recorded route: the SVM against every row, within the budget (beside a network of 3
        # epochs its estimated cost is not).
        patch.setattr(_costs, "flat_svm_cost", lambda *args: 0.0)
        clf = HierarchicalClassifier(tree, max_epochs=3, random_state=0, semantics="terminal",
                                     **params).fit(X, y)
    return clf, X[:40]


def _answers(clf, X):
    top = clf.predict_top_k(X, k=3)
    last = [[str([v for v in p if v != ""][-1]) if any(v != "" for v in p) else "" for p in row] for row in top]
    return clf.predict_node(X).tolist(), last, clf.predict_confidence(X)


@pytest.mark.parametrize("name", ["sparse", "dense"])
def test_fixed_weights_give_the_recorded_answers_through_predict_save_load_and_export(name, tmp_path):
    clf, X = _case(name)
    expected = RECORDED[name]
    # The answers were recorded with the flat term fitted against every row (dense weights): a
    # fit that chooses the SVM of the candidates for these rows answers otherwise by design.
    assert not sp.issparse(clf.answer_.terms["flat_term"].coef), clf.config_.flat_term_reason
    for model in (clf, load_classifier(save_classifier(clf, tmp_path / "model"))):
        node, top, confidence = _answers(model, X)
        assert node == expected["node"]
        assert top == expected["top"]
        np.testing.assert_allclose(confidence, expected["confidence"], rtol=0, atol=2e-5)
    dense = torch.as_tensor(X.toarray() if hasattr(X, "toarray") else X)
    with torch.no_grad():
        paths, _, confidence = serving_module(clf, confidence=True)(dense)
    depth = (paths >= 0).sum(1) - 1
    exported = paths[torch.arange(paths.shape[0]), depth.clamp(min=0)]
    assert exported.tolist() == expected["node"]
    np.testing.assert_allclose(confidence.numpy(), expected["confidence"], rtol=0, atol=1e-4)
