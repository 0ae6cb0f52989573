"""Saving a fitted classifier without pickle (safetensors + tree .npz + JSON), issue 13 item 5."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import torch

pytest.importorskip("safetensors", reason="saving without pickle needs safetensors (the 'persist' extra)")

from hiclass_parallel.datasets import make_hierarchical_classification  # noqa: E402
from hiclass_parallel.estimators import HierarchicalClassifier, load_classifier, save_classifier  # noqa: E402

pytestmark = pytest.mark.scale_out


class CustomNet(torch.nn.Module):
    """A user module outside the allow-list."""

    def __init__(self, n_features: int, n_outputs: int):
        super().__init__()
        self.linear = torch.nn.Linear(n_features, n_outputs)

    def forward(self, X):
        return self.linear(X)


@pytest.fixture(scope="module")
def data():
    return make_hierarchical_classification(n_samples=150, n_features=6, branching=3, depth=2, random_state=0)


def test_round_trip_predicts_identically(tmp_path, data):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0, module__hidden_units=16,
                                 module__activation=torch.nn.Tanh, optimizer__weight_decay=1e-4).fit(X, y)
    save_classifier(clf, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["params"]["module__activation"] == {"__class__": "torch.nn.modules.activation.Tanh"}
    loaded = load_classifier(tmp_path)
    assert loaded.get_params()["module__activation"] is torch.nn.Tanh
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))
    np.testing.assert_array_equal(loaded.predict_proba(X), clf.predict_proba(X))
    assert loaded.tree_ == clf.tree_
    assert (loaded.partition_, loaded.stop_, loaded.n_scores_) == (clf.partition_, clf.stop_, clf.n_scores_)
    # A loaded model keeps training (fresh optimizer state) and still pickles.
    loaded.partial_fit(X, y)
    assert pickle.loads(pickle.dumps(loaded)).predict(X[:3]).shape == (3, tree.n_levels)


def test_sparse_terminal_sibling_model_round_trips(tmp_path):
    X, y, tree = make_hierarchical_classification(n_samples=120, n_features=20, branching=3, depth=3, random_state=1)
    X = sp.csr_matrix(np.where(np.abs(X) > 1.0, X, 0.0))
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=1, random_state=0,
                                 module__hidden_units=8).fit(X, y)
    assert clf.path_local_ and clf.stop_
    loaded = load_classifier(save_classifier(clf, tmp_path / "model"))
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))
    np.testing.assert_array_equal(loaded.predict_stop_proba(X), clf.predict_stop_proba(X))


def test_classes_outside_the_allow_list_need_consent(tmp_path, data):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, module=CustomNet, max_epochs=1, random_state=0).fit(X, y)
    save_classifier(clf, tmp_path)
    path = f"{__name__}.CustomNet"
    with pytest.raises(ValueError, match=r"parameter 'module' names the class .*CustomNet.*allowed="):
        load_classifier(tmp_path)
    for kwargs in ({"allowed": [path]}, {"trusted": True}):
        loaded = load_classifier(tmp_path, **kwargs)
        assert loaded.module is CustomNet
        np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))


def test_unserialisable_parameters_are_named(tmp_path, data):
    from skorch.callbacks import EpochTimer

    X, y, tree = data
    clf = HierarchicalClassifier(tree, max_epochs=1, callbacks=[EpochTimer()]).fit(X, y)
    with pytest.raises(TypeError, match=r"parameter 'callbacks\[0\]' without pickle.*EpochTimer"):
        save_classifier(clf, tmp_path)

    class Local(CustomNet):
        pass

    clf = HierarchicalClassifier(tree, module=Local, max_epochs=1).fit(X, y)
    with pytest.raises(TypeError, match=r"parameter 'module'.*inside a function"):
        save_classifier(clf, tmp_path)
    clf.set_params(module=CustomNet, random_state=np.random.RandomState(0))
    with pytest.raises(TypeError, match=r"parameter 'random_state'.*RandomState"):
        save_classifier(clf, tmp_path)


def test_newer_formats_and_other_files_are_refused(tmp_path, data):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, max_epochs=1).fit(X, y)
    save_classifier(clf, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["format_version"] = 99
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="newer"):
        load_classifier(tmp_path)
    config["format"] = "something else"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="not a saved HierarchicalClassifier"):
        load_classifier(tmp_path)


def test_learned_tree_with_string_labels(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4)).astype(np.float32)
    y = np.array([["animal", "dog"], ["animal", "cat"], ["plant", ""]] * 20, dtype=object)
    clf = HierarchicalClassifier(max_epochs=1, random_state=0).fit(X, y)
    loaded = load_classifier(save_classifier(clf, tmp_path))
    assert loaded.tree is None and loaded.pad_label_ == ""
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))
    assert loaded.score(X, y) == clf.score(X, y)
