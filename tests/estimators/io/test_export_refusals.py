"""Export refuses an estimator it cannot export by name, before importing any optional exporter."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier, export_onnx

pytestmark = pytest.mark.scale_out


@pytest.fixture
def no_onnx(monkeypatch):
    """As where the ``export`` extra is not installed: importing onnx or onnxscript fails."""
    for name in ("onnx", "onnxscript"):
        monkeypatch.setitem(sys.modules, name, None)  # a None entry makes ``import name`` raise ImportError
    with pytest.raises(ImportError):
        import onnxscript  # noqa: F401


def test_a_multi_label_classifier_is_named_without_onnxscript(no_onnx, tmp_path):
    from hiclass_parallel.dag import Dag
    from hiclass_parallel.estimators import MultiLabelHierarchicalClassifier

    dag = Dag.from_edges([("d", "b"), ("d", "c"), ("b", "a"), ("c", "a")])
    X = np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32)
    clf = MultiLabelHierarchicalClassifier(dag, max_epochs=1, random_state=0).fit(X, [["d"], ["b"]] * 10)
    with pytest.raises(TypeError, match=r"MultiLabelHierarchicalClassifier is not exported"):
        export_onnx(clf, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def test_other_unexportable_estimators_are_named_without_onnxscript(no_onnx, tmp_path):
    from sklearn.linear_model import LogisticRegression

    X, y, tree = make_hierarchical_classification(n_samples=60, n_features=4, branching=2, depth=2, random_state=0)
    flat = LogisticRegression().fit(X, y)
    with pytest.raises(TypeError, match=r"sklearn\.linear_model\..*LogisticRegression is not exported"):
        export_onnx(flat, tmp_path / "model.onnx")
    clf = HierarchicalClassifier(tree, decoding="threshold", max_epochs=1, random_state=0,
                                 module__hidden_units=8).fit(X, y)
    with pytest.raises(ValueError, match=r"only decoding='best' is exported.*'threshold'"):
        export_onnx(clf, tmp_path / "model.onnx")
    # An exportable classifier gets as far as the import, which names the missing extra.
    clf.set_params(decoding="best")
    with pytest.raises(ImportError, match=r"onnxscript"):
        export_onnx(clf, tmp_path / "model.onnx")
