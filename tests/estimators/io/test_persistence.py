"""Saving a fitted classifier without pickle (safetensors + tree .npz + JSON)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import torch

pytest.importorskip("safetensors", reason="saving without pickle needs safetensors (the 'persist' extra)")
from support import sparse_rows

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import (
    HierarchicalClassifier,
    load_classifier,
    save_classifier,
)

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
    assert config["params"]["module__activation"] == {"__class__": "torch.nn.modules.activation:Tanh"}
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


# ---------------------------------------------------------------------------- tampered folders
def _tamper(folder, edit, redigest=True):
    """Edit config.json with ``edit(config)``; with ``redigest``, recompute its own digest as an
    attacker who knows the format would, so that the checks behind the digest are reached."""
    from hiclass_parallel.estimators.io._persistence import _config_digest

    config = json.loads((folder / "config.json").read_text())
    edit(config)
    if redigest and "digests" in config:
        config["digests"]["config.json"] = _config_digest(config)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture()
def saved(tmp_path, data):
    X, y, tree = data
    clf = HierarchicalClassifier(tree, partition="level", max_epochs=1, random_state=0, module__hidden_units=8).fit(X, y)
    save_classifier(clf, tmp_path / "model")
    return tmp_path / "model"


PAYLOADS = [
    # The reported hole: an attribute chain through modules the package imports.
    ("module_class_", "hiclass_parallel._backend.np.f2py.subprocess.Popen"),
    ("module_class_", "hiclass_parallel._backend:np"),
    ("module_class_", "hiclass_parallel.ops.engine._native.ctypes.CDLL"),
    ("module_class_", "hiclass_parallel.ops.engine._native:ctypes"),
    ("module", "hiclass_parallel.ops.engine._native.ctypes:CDLL"),
    ("module", "os:system"),
    ("module", "os.system"),
    ("module", "builtins:eval"),
    ("module", "subprocess:Popen"),
    ("module", "functools:partial"),
    ("module", "torch.nn.modules.module:torch"),  # a module re-exported by an allowed module
    ("optimizer", "torch.nn.modules.linear:Linear"),  # allowed module, wrong kind of class
    ("module_class_", "torch.optim.adam:Adam"),
    ("module__activation", "hiclass_parallel.estimators.io._persistence:Path"),  # pathlib's, re-exported
    ("module", "hiclass_parallel.__main__:main"),  # importing it would run the command line
    ("module", "hiclass_parallel.tree:Tree.load"),  # nested attribute
    ("module", "hiclass_parallel.tree:"),
    ("module", ":Tree"),
    ("module", "hiclass_parallel..tree:Tree"),
]


@pytest.mark.parametrize("field, path", PAYLOADS)
def test_tampered_class_paths_run_nothing(saved, tmp_path, monkeypatch, field, path):
    import importlib
    import subprocess

    calls = []
    monkeypatch.setattr(subprocess.Popen, "__init__", lambda *a, **k: calls.append(a))
    monkeypatch.chdir(tmp_path)
    imported = []
    real_import = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: imported.append(name) or real_import(name, *a))

    def edit(config):
        section = "fitted" if field.endswith("_") else "params"
        config[section][field] = {"__class__": path}
        config["params"]["module__args"] = ["touch", "PWNED"]

    _tamper(saved, edit)
    with pytest.raises(ValueError, match=rf"parameter '{field}'"):
        load_classifier(saved)
    assert calls == [] and not (tmp_path / "PWNED").exists()
    # Nothing outside the allow-list was even imported.
    assert all(name.startswith(("hiclass_parallel", "torch.nn", "torch.optim")) for name in imported), imported
    assert "hiclass_parallel.__main__" not in imported


def test_tampered_estimator_class_is_refused(saved):
    for path in ("os:system", "hiclass_parallel.estimators.networks._modules:MLP", "sklearn.linear_model:LogisticRegression"):
        _tamper(saved, lambda c, p=path: c.update({"class": p}))
        with pytest.raises(ValueError, match="the estimator class"):
            load_classifier(saved)


def test_edited_config_without_new_digest_is_refused(saved):
    _tamper(saved, lambda c: c["fitted"].update(partition_="sibling"), redigest=False)
    with pytest.raises(ValueError, match="config.json was modified after it was saved"):
        load_classifier(saved)


def test_files_of_another_model_are_refused(saved, tmp_path):
    X, y, tree = make_hierarchical_classification(n_samples=80, n_features=6, branching=2, depth=3, random_state=2)
    other = save_classifier(HierarchicalClassifier(tree, max_epochs=1, module__hidden_units=8).fit(X, y),
                            tmp_path / "other")
    for name in ("tree.npz", "weights.safetensors"):
        original = (saved / name).read_bytes()
        (saved / name).write_bytes((other / name).read_bytes())
        with pytest.raises(ValueError, match=rf"{name} is not the file saved with .*config.json"):
            load_classifier(saved)
        (saved / name).write_bytes(original)
    load_classifier(saved)  # intact again


def _edit_config_(change):
    def edit(config):
        config["fitted"]["config_"]["__dict__"].update(change)
    return edit


def test_inconsistent_fitted_settings_are_named(saved, data):
    _, _, tree = data
    cases = [
        ({"partition": "sibling"}, None),  # same width without stops: only the digest (tested above) tells
        ({"partition": "nonsense"}, "partition='nonsense' is not one of"),
        ({"training": "path_local"}, "training='path_local' needs the sibling partition"),
        ({"n_levels": tree.n_levels + 1}, "n_levels=.* but the tree has"),
        ({"n_scores": tree.n_classes + 3}, "n_scores=.* needs"),
        ({"n_features": 99}, "n_features=99 but n_features_in_=6"),
        ({"stop": "yes"}, "stop='yes' is not a bool"),
        ({"capabilities": {"__dict__": {"accepts_sparse": True, "scores_columns": True, "class_features": True,
                                        "default_lr": 0.005, "default_optimizer": None}}},
         "can do other things now than when the model was saved"),
    ]
    for change, message in cases:
        config = json.loads((saved / "config.json").read_text())
        _tamper(saved, _edit_config_(change))
        if message is None:  # a consistent edit of the settings: loads, as the digest was recomputed
            load_classifier(saved)
        else:
            with pytest.raises(ValueError, match=message):
                load_classifier(saved)
        (saved / "config.json").write_text(json.dumps(config))
    _tamper(saved, lambda c: c["fitted"].update(pad_label_=str(tree.labels[0])))
    with pytest.raises(ValueError, match="pad_label .* is a label of the tree"):
        load_classifier(saved)


def test_incomplete_config_is_named(saved):
    for field in ("format_version", "fitted", "params", "digests"):
        config = json.loads((saved / "config.json").read_text())
        _tamper(saved, lambda c, f=field: c.pop(f))
        with pytest.raises(ValueError, match=rf"lacks the field '{field}'"):
            load_classifier(saved)
        (saved / "config.json").write_text(json.dumps(config))
    (saved / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_classifier(saved)


def test_unavailable_device_is_named(saved):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal of an unavailable device cannot be shown here")
    with pytest.raises(ValueError, match=r"device='cuda' but torch"):
        load_classifier(saved, device="cuda")
    with pytest.raises(ValueError, match="not a torch device"):
        load_classifier(saved, device="gpu0")


@pytest.mark.parametrize("version", [1, 2])
def test_older_formats_are_refused_by_name(saved, version):
    # Nothing was released before this format: a file of an older one is named, never read.
    from hiclass_parallel.estimators.io._persistence import FORMAT_VERSION
    from hiclass_parallel.exceptions import ModelFileError

    assert json.loads((saved / "config.json").read_text())["format_version"] == FORMAT_VERSION
    _tamper(saved, lambda config: config.update(format_version=version))
    with pytest.raises(ModelFileError, match=rf"saved in format {version}, older than the one .* reads "
                                             rf"\({FORMAT_VERSION}\): fit the model again"):
        load_classifier(saved)


def test_a_class_saved_as_a_dotted_path_is_refused(saved):
    # Classes are saved as "module:Name"; a dotted "module.Name" is not a class path.
    _tamper(saved, lambda config: config["params"].update(module={"__class__": "hiclass_parallel.estimators.networks._modules.MLP"}))
    with pytest.raises(ValueError, match=r"parameter 'module': .* is not a class path of the form 'package.module:ClassName'"):
        load_classifier(saved)


def test_a_model_whose_module_could_do_less_when_saved_is_refused(saved):
    # The saved capabilities are the module class's as it is now: any difference (here MLP
    # without scoring columns on demand) is an inconsistent model, named.
    _tamper(saved, lambda c: c["fitted"]["config_"]["__dict__"]["capabilities"]["__dict__"].update(scores_columns=False))
    with pytest.raises(ValueError, match="can do other things now than when the model was saved"):
        load_classifier(saved)


def _capabilities(config):
    return config["fitted"]["config_"]["__dict__"]["capabilities"]["__dict__"]


#: LazyAdam groups other than the module's: none, and the input layer's group alone.
_OTHER_GROUPS = {
    "none": lambda capabilities: capabilities.pop("lazy_adam_groups"),
    "input layer only": lambda capabilities: capabilities.update(lazy_adam_groups={"__tuple__": [
        {"__tuple__": ["input.embedding.weight", {"__dict__": {"lr_scale": 3.0, "second_moment": "row"}}]}]}),
}


@pytest.mark.parametrize("other", list(_OTHER_GROUPS))
def test_models_saved_with_other_lazy_adam_groups_are_refused(tmp_path, other):
    # The groups are part of the module's capabilities: a file whose groups differ from the
    # module's is named like any other capability change.
    from hiclass_parallel import Tree

    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1])
    X = sparse_rows(60, 12, density=0.3, seed=0)
    y = np.arange(60) % 6
    clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(X, y)
    folder = save_classifier(clf, tmp_path / "model")
    _tamper(folder, lambda config: _OTHER_GROUPS[other](_capabilities(config)))
    with pytest.raises(ValueError, match="can do other things now than when the model was saved"):
        load_classifier(folder)


def _answer_entry(config):
    return config["fitted"]["answer_"]["__dict__"]


def test_the_answer_model_s_scale_and_weights_are_checked(saved):
    """The saved model (dense rows) has Gaussian prototypes: a missing or bad scale or weight, a
    term the file does not know or a term without its file is named."""
    assert load_classifier(saved).answer_.term("prototypes") is not None
    _tamper(saved, lambda c: _answer_entry(c).pop("scale"))
    with pytest.raises(ValueError, match="answer_ must hold exactly"):
        load_classifier(saved)
    for bad in (0.0, -1.0, "x", float("inf")):
        _tamper(saved, lambda c, b=bad: _answer_entry(c).update(scale=b))
        with pytest.raises(ValueError, match="answer_: the answer model's scale must be a finite number > 0"):
            load_classifier(saved)
    for bad in (-1.0, "x", float("nan")):
        _tamper(saved, lambda c, b=bad: _answer_entry(c).update(scale=1.0, weights={"__dict__": {"prototypes": b}}))
        with pytest.raises(ValueError, match="the weight of term 'prototypes' must be a finite number >= 0"):
            load_classifier(saved)
    _tamper(saved, lambda c: _answer_entry(c).update(weights={"__dict__": {}}))
    with pytest.raises(ValueError, match="weights .* must name its terms"):
        load_classifier(saved)
    _tamper(saved, lambda c: _answer_entry(c).update(terms=["prototypes", "bm25"]))
    with pytest.raises(ValueError, match="terms must be distinct names of"):
        load_classifier(saved)
    _tamper(saved, lambda c: _answer_entry(c).update(terms=[]))
    with pytest.raises(ValueError, match="prototypes.npz is there but .* describes no prototypes term"):
        load_classifier(saved)


def test_every_term_file_is_tied_to_its_model_by_its_digest(tmp_path):
    """A flat term's file from another model of the same tree and features (which its own
    checks would accept) is refused by the digest, as the prototypes' file is."""
    from support import text_like

    X, y, tree = text_like(n_samples=200, seed=4)
    folders = []
    for seed in (0, 1):
        clf = HierarchicalClassifier(tree, max_epochs=1, random_state=seed, prototypes=None, flat_term=4.0,
                                     calibration=None, semantics="terminal").fit(X, y)
        assert clf.answer_.term("flat_term") is not None
        folders.append(save_classifier(clf, tmp_path / f"m{seed}"))
    assert (folders[0] / "flat_term.npz").read_bytes() != (folders[1] / "flat_term.npz").read_bytes()
    (folders[0] / "flat_term.npz").write_bytes((folders[1] / "flat_term.npz").read_bytes())
    with pytest.raises(ValueError, match="flat_term.npz is not the file saved with"):
        load_classifier(folders[0])


def test_a_model_of_the_previous_format_is_refused_by_name(saved):
    """Files saved before the answer model (format 3: prototypes_, flat_term_, calibrator_ apart)
    are refused with the versions named."""
    _tamper(saved, lambda c: c.update(format_version=3))
    with pytest.raises(ValueError, match="saved in format 3, older than the one this version of hiclass_parallel "
                                         "reads \\(4\\)"):
        load_classifier(saved)
