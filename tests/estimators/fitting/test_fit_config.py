"""The fit pipeline's one resolved configuration (config_), the training route it reports, and
what it refuses: routes that cannot run, criterion parameters of another route, diverged fits."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from support import sparse_rows

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import MLP, HierarchicalClassifier, SparseMLP
from hiclass_parallel.estimators.networks import module_capabilities
from hiclass_parallel.exceptions import DivergedError
from hiclass_parallel.losses import HierarchicalCrossEntropy, PathLocalCrossEntropy

FAST = dict(max_epochs=2, random_state=0, module__hidden_units=8)


@pytest.fixture(scope="module")
def data():
    X, y, tree = make_hierarchical_classification(n_samples=150, n_features=12, branching=3, depth=2, random_state=0)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.8, X, 0.0).astype(np.float32))
    return X, Xs, y, tree


def _count_best_first(monkeypatch):
    from hiclass_parallel.estimators.prediction import _decode  # decoding's own name for the search

    calls = []
    real = _decode.best_first_paths
    monkeypatch.setattr(_decode, "best_first_paths", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("training, expected", [("auto", "path_local"), ("path_local", "path_local"), ("full", "full")])
def test_the_reported_route_is_the_route_that_ran(data, monkeypatch, training, expected):
    _, Xs, y, tree = data
    clf = HierarchicalClassifier(tree, training=training, **FAST).fit(Xs, y)
    assert clf.config_.training == clf.training_ == expected
    assert clf.path_local_ is (expected == "path_local") and clf.net_.path_local is clf.path_local_
    assert isinstance(clf.net_.criterion_, PathLocalCrossEntropy if clf.path_local_ else HierarchicalCrossEntropy)
    calls = _count_best_first(monkeypatch)
    clf.predict(Xs[:5])
    assert bool(calls) is clf.path_local_  # best-first decoding exactly when trained path-locally
    # both routes train the same model family: predictions are valid paths of the tree
    assert (clf.predict(Xs[:5])[:, 0] != "").all()


@pytest.mark.parametrize("sparse, training, decoding", [
    (True, "auto", "best"), (False, "auto", "best"), (False, "auto", "hf1"), (False, "auto", "threshold"),
    (False, "full", "best"),
])
def test_the_decoding_route_reported_is_the_route_that_ran(data, decoding_routes_ran, sparse, training, decoding):
    from hiclass_parallel.ops.decode import decoding_route

    X = data[1] if sparse else data[0]
    clf = HierarchicalClassifier(data[3], training=training, decoding=decoding, **FAST).fit(X, data[2])
    threshold = clf.threshold if decoding == "threshold" else None
    route = decoding_route(clf.partition_, on_demand=clf.path_local_, threshold=threshold, device=clf.net_.device)
    if route != "exhaustive":  # the search is chosen per batch, from the batch's score function
        hidden = next(clf.net_.outputs(clf._dataset(clf._validate_X(X[:2], reset=False)), hidden=True))
        route = decoding_route(clf.partition_, on_demand=True, score=clf.net_.module_.scorer(hidden))
    decoding_routes_ran.clear()
    clf.predict(X[:5])
    assert decoding_routes_ran and set(decoding_routes_ran) == {route}
    assert (route == "exhaustive") is (training == "full" or decoding == "threshold")


def test_a_model_on_a_gpu_decodes_exhaustively():
    from hiclass_parallel.ops.decode import decoding_route

    for device in ("cuda", "cuda:1", torch.device("cuda")):
        assert decoding_route("sibling", on_demand=True, device=device) == "exhaustive"
    assert decoding_route("sibling", on_demand=True, device="cpu") == "best_first"
    # asked by the search itself (a score function given), the answer is the search that runs
    def score(rows, columns):
        return torch.zeros(len(rows), device="cuda")

    assert decoding_route("sibling", on_demand=True, score=score, device="cuda") == "best_first_torch"


def test_config_holds_every_resolved_default(data):
    X, Xs, y, tree = data
    dense = HierarchicalClassifier(tree, random_state=0, module__hidden_units=8, max_epochs=1).fit(X, y)
    text = HierarchicalClassifier(tree, random_state=0, module__hidden_units=8).fit(Xs, y)
    assert (dense.config_.module_class, dense.config_.partition, dense.config_.training) == (MLP, "sibling",
                                                                                          "path_local")
    assert dense.config_.optimizer is torch.optim.Adam and dense.config_.lr == 3e-3 and dense.config_.max_epochs == 1
    assert (text.config_.module_class, text.config_.partition, text.config_.training) == (SparseMLP, "sibling",
                                                                                         "path_local")
    assert text.config_.optimizer.__name__ == "LazyAdam" and text.config_.lr == 5e-3
    # few rows: batches halved until an epoch has 4 steps, then 35 / sqrt(steps) epochs (at most 30)
    steps = -(-Xs.shape[0] // text.config_.batch_size)
    assert text.config_.batch_size == text.net_.batch_size < 256 and steps >= 4 or text.config_.batch_size == 32
    assert text.config_.max_epochs == min(30, round(35 / steps ** 0.5)) == len(text.net_.history)
    assert dense.config_.batch_size == 256 and "default for this module" in dense.config_.batch_size_reason
    assert text.config_.capabilities == module_capabilities(SparseMLP)
    with pytest.raises(AttributeError):  # frozen: one configuration per fit
        text.config_.lr = 1.0


class Scores(torch.nn.Module):
    """A module without encode/scorer: it gives every score, nothing on demand."""

    def __init__(self, n_features: int, n_outputs: int, hidden_units: int = 8):
        super().__init__()
        self.linear = torch.nn.Linear(n_features, n_outputs)

    def forward(self, X):
        return self.linear(X)


def test_impossible_path_local_training_is_named(data):
    X, Xs, y, tree = data
    with pytest.raises(ValueError, match=r"training='path_local' is not possible here: .*Scores cannot score columns"):
        HierarchicalClassifier(tree, module=Scores, training="path_local", partition="sibling", **FAST).fit(X, y)
    with pytest.raises(ValueError, match=r"training='path_local' is not possible here: partition='level'"):
        HierarchicalClassifier(tree, training="path_local", partition="level", **FAST).fit(Xs, y)


def test_a_criterion_parameter_never_switches_the_route(data):
    _, Xs, y, tree = data
    with pytest.raises(ValueError, match=r"criterion__level_weights: not a parameter of PathLocalCrossEntropy.*"
                                         r"training='full'"):
        HierarchicalClassifier(tree, criterion__level_weights=[1.0, 2.0], **FAST).fit(Xs, y)
    clf = HierarchicalClassifier(tree, training="full", criterion__level_weights=[1.0, 2.0], **FAST).fit(Xs, y)
    assert clf.training_ == "full" and clf.net_.criterion_.level_weights is not None


def test_continuing_refuses_a_changed_route(data):
    _, Xs, y, tree = data
    clf = HierarchicalClassifier(tree, **FAST).fit(Xs, y)
    clf.set_params(training="full")
    with pytest.raises(ValueError, match="cannot continue training: training changed"):
        clf.partial_fit(Xs, y)
    clf.set_params(training="auto", lr=0.01).partial_fit(Xs, y)
    assert clf.net_.lr == 0.01 and clf.config_.lr == 5e-3  # the fit's configuration stays as it was resolved


def test_loader_parameters_changed_after_fit_reach_the_loader(data):
    X, _, y, tree = data
    clf = HierarchicalClassifier(tree, batch_size=32, **FAST).fit(X, y)
    clf.set_params(iterator_train__num_workers=1, iterator_train__drop_last=True)
    clf.partial_fit(X, y)  # skorch's set_params would refuse iterator_* on an initialised net
    loader = clf.net_.get_iterator(clf._dataset(X), training=True)
    assert loader.num_workers == 1 and loader.drop_last
    assert len(clf.net_.history[-1, "batches"]) == len(X) // 32  # the last, short batch was dropped


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_loader_workers_and_a_criterion_change_after_fit_reach_partial_fit(data):
    X, _, y, tree = data
    clf = HierarchicalClassifier(tree, training="full", batch_size=32, **FAST).fit(X, y)
    criterion = clf.net_.criterion_
    # skorch's set_params alone refuses iterator_* on an initialised net; mixed with a criterion
    # parameter it re-initialises the criterion (and the optimizer)
    clf.set_params(iterator_train__num_workers=4, criterion__level_weights=[1.0, 2.0], lr=0.01)
    clf.partial_fit(X, y)
    assert clf.net_.get_iterator(clf._dataset(X), training=True).num_workers == 4
    assert len(clf.net_.history) == FAST["max_epochs"] + 1
    assert clf.net_.criterion_ is not criterion and clf.net_.criterion_.level_weights is not None
    assert clf.net_.optimizer_.param_groups[0]["lr"] == 0.01


def test_continuing_hands_over_what_changed_in_the_parameters_once(data):
    X, _, y, tree = data
    clf = HierarchicalClassifier(tree, **FAST).fit(X, y)
    clf.set_params(lr=0.01)
    clf.partial_fit(X, y)
    group = clf.net_.optimizer_.param_groups[0]
    assert group["lr"] == 0.01
    group["lr"] = 0.002  # as a learning-rate schedule would: the net's own state, not a parameter
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf.partial_fit(X, y)
    assert clf.net_.optimizer_.param_groups[0] is group and group["lr"] == 0.002


def test_parameters_the_net_is_built_from_are_named_when_continuing(data):
    X, Xs, y, tree = data
    clf = HierarchicalClassifier(tree, **FAST).fit(X, y)
    clf.set_params(optimizer=torch.optim.SGD, tol=0.1)
    with pytest.warns(UserWarning, match=r"^optimizer, tol changed since the network was built") as record:
        clf.partial_fit(X, y)
    assert record[0].filename == __file__  # the warning points at the caller
    assert type(clf.net_.optimizer_) is torch.optim.Adam
    clf.set_params(optimizer=None, tol=1e-4)  # back to what the net was built from
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf.partial_fit(X, y)
        # class_features are the module's rows derived from the parameter: still the same parameter
        F = sparse_rows(tree.n_classes, X.shape[1], density=0.3, seed=0, dtype=np.float64)
        text = HierarchicalClassifier(tree, semantics="terminal", module__class_features=F, **FAST).fit(Xs, y)
        text.partial_fit(Xs, y)


def test_a_diverged_fit_is_an_error_not_empty_paths(data):
    X, _, y, tree = data
    clf = HierarchicalClassifier(tree, max_epochs=2, optimizer=torch.optim.SGD, lr=1e12, random_state=0)
    with pytest.raises(DivergedError, match=r"NaN or infinite scores .*lr=1e\+12.*training diverged"):
        clf.fit(X, y)
    assert not hasattr(clf, "net_")  # nothing half-fitted is left


def test_predict_refuses_non_finite_scores(data):
    X, _, y, tree = data
    clf = HierarchicalClassifier(tree, **FAST).fit(X, y)
    with torch.no_grad():
        next(clf.net_.module_.parameters()).fill_(float("inf"))
    for call in (lambda: clf.predict(X), lambda: clf.score(X, y)):
        with pytest.raises(DivergedError, match=r"150 of 150 sample\(s\) of finite input got NaN or infinite scores"):
            call()


def test_capabilities_are_read_from_the_protocol():
    class Dense(torch.nn.Module):
        def __init__(self, n_features, n_outputs):
            super().__init__()

    class Columns(Dense):
        accepts_sparse = True
        default_lr = 0.1
        default_optimizer = torch.optim.SGD

        def __init__(self, n_features, n_outputs, class_features=None):
            super().__init__(n_features, n_outputs)

        def encode(self, X):
            return X

        def scorer(self, hidden):
            return hidden

    dense, columns = module_capabilities(Dense), module_capabilities(Columns)
    assert (dense.accepts_sparse, dense.scores_columns, dense.class_features) == (False, False, False)
    assert (dense.default_lr, dense.default_optimizer) == (3e-3, torch.optim.Adam)
    assert (columns.accepts_sparse, columns.scores_columns, columns.class_features) == (True, True, True)
    assert (columns.default_lr, columns.default_optimizer) == (0.1, torch.optim.SGD)
    assert dense.default_max_epochs(10_000, 256) == 10
    assert columns.default_max_epochs(64 * 256, 256) == 4  # 35 / sqrt(64) = 4.4, to the nearest; within [2, 30]
    assert columns.default_max_epochs(257 * 256, 256) == 2  # all WordNet nouns: 2.18


def _dag_toy():
    from hiclass_parallel.dag import Dag

    dag = Dag.from_edges([("animal", "pet"), ("animal", "canine"), ("pet", "dog"), ("canine", "dog"),
                          ("animal", "cat")])
    rng = np.random.default_rng(0)
    X = (np.repeat(np.eye(3), 20, axis=0) * 3 + 0.3 * rng.standard_normal((60, 3))).astype(np.float32)
    return dag, X, [["dog"]] * 20 + [["cat"]] * 20 + [["canine"]] * 20


@pytest.mark.parametrize("route", ["sparse fused", "sparse torch (kernel off)", "dense MLP", "full softmax", "dag"])
def test_the_engines_criterion_and_optimizer_the_config_reports_are_what_ran(data, monkeypatch, route):
    from hiclass_parallel.estimators import MultiLabelHierarchicalClassifier
    from hiclass_parallel.estimators.networks._optim import LazyAdam
    from hiclass_parallel.estimators.networks.engines import _fused
    from hiclass_parallel.losses import DagCrossEntropy

    X, Xs, y, tree = data
    fused_calls = []  # the module of each fused step (a fit may train more nets than net_: held-out rows)
    real = _fused.fused_step
    monkeypatch.setattr(_fused, "fused_step",
                        lambda module, *a, **k: fused_calls.append(module) or real(module, *a, **k))
    if route == "sparse torch (kernel off)":
        monkeypatch.setattr("hiclass_parallel.estimators.networks.engines._fused.native.available", lambda: False)
    if route == "dag":
        dag, Xd, yd = _dag_toy()
        clf = MultiLabelHierarchicalClassifier(dag, semantics="terminal", max_epochs=2, random_state=0,
                                               module__hidden_units=8).fit(Xd, yd)
    else:
        clf = HierarchicalClassifier(tree, training="full" if route == "full softmax" else "auto",
                                     **FAST).fit(Xs if route.startswith("sparse") else X, y)
    config, net = clf.config_, clf.net_
    expected = {  # route: (step engine, update engine, criterion, level_contrast, optimizer)
        "sparse fused": ("fused", "fused", PathLocalCrossEntropy, 0.1, LazyAdam),
        "sparse torch (kernel off)": ("torch", "optimizer", PathLocalCrossEntropy, 0.1, LazyAdam),
        "dense MLP": ("torch", "optimizer", PathLocalCrossEntropy, 0.1, torch.optim.Adam),
        "full softmax": ("torch", "optimizer", HierarchicalCrossEntropy, None, torch.optim.Adam),
        "dag": ("torch", "optimizer", DagCrossEntropy, 0.3, torch.optim.Adam),
    }[route]
    # what the configuration reports ...
    assert (config.step_engine, config.update_engine, config.criterion,
            config.criterion_options.get("level_contrast"), config.optimizer) == expected
    assert config.step_engine_reason and config.update_engine_reason
    if route == "sparse torch (kernel off)":
        assert "C kernel" in config.step_engine_reason
    # ... is what ran: the net's engines, every training step fused or none, the classes built
    assert (net.step_engine_, net.update_engine_) == expected[:2]
    assert net.step_fallbacks_ == 0 and net.update_fallbacks_ == 0
    n_steps = sum(len(epoch["batches"]) for epoch in net.history)
    fused_here = sum(m is net.module_ for m in fused_calls)
    assert n_steps > 0 and fused_here == (n_steps if config.step_engine == "fused" else 0)
    assert config.step_engine == "fused" or not fused_calls
    assert type(net.criterion_) is config.criterion and type(net.optimizer_) is config.optimizer
    assert getattr(net.criterion_, "level_contrast", None) == expected[3]
    if config.optimizer is torch.optim.Adam:
        assert config.optimizer_options == {"fused": True} and net.optimizer_.defaults["fused"] is True
    else:  # the text model's input layer in its own group
        assert [name for name, _ in config.optimizer_options["param_groups"]]
        assert len(net.optimizer_.param_groups) == 1 + len(config.optimizer_options["param_groups"])
    assert config.threads == (1 if torch.get_num_threads() > 1 and not __import__("os").environ.get(
        "OMP_WAIT_POLICY") else None)


def test_a_batch_the_fused_step_cannot_take_is_the_counted_fallback(data, monkeypatch):
    from hiclass_parallel.estimators.networks.engines import FusedEngine

    _, Xs, y, tree = data
    monkeypatch.setattr(FusedEngine, "batch_refusal", staticmethod(lambda *a: "a batch it cannot take"))
    clf = HierarchicalClassifier(tree, **FAST).fit(Xs, y)
    assert clf.config_.step_engine == "fused"  # chosen once; the batches fell back, counted and named
    n_steps = sum(len(epoch["batches"]) for epoch in clf.net_.history)  # one training call (no calibration)
    assert clf.answer_.calibrator is None and clf.net_.step_fallbacks_ == n_steps and clf.net_.step_fallback_reason_ == "a batch it cannot take"


# ---------------------------------------------------------------------------- batch_size="auto"
@pytest.mark.parametrize("n_rows, batch", [(100, 32), (150, 32), (300, 64), (600, 128), (1023, 128), (1024, 256)])
def test_auto_batches_give_a_small_text_fit_four_steps_per_epoch(n_rows, batch):
    X, y, tree = make_hierarchical_classification(n_samples=n_rows, n_features=12, branching=3, depth=2,
                                                  random_state=0)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.8, X, 0.0).astype(np.float32))
    clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0, module__hidden_units=8,
                                 calibration=None).fit(Xs, y)
    assert clf.config_.batch_size == clf.net_.batch_size == batch
    assert (f"batches of {batch}" in clf.config_.batch_size_reason) == (batch < 256)
    # the epoch rule counts the steps of these batches
    steps = -(-n_rows // batch)
    assert HierarchicalClassifier(tree, random_state=0, module__hidden_units=8, calibration=None).fit(
        Xs, y).config_.max_epochs == min(30, max(2, round(35 / steps ** 0.5)))


def test_auto_batches_keep_256_for_dense_mlp_streams_and_a_given_size(data):
    X, Xs, y, tree = data
    assert HierarchicalClassifier(tree, **FAST).fit(X, y).config_.batch_size == 256  # MLP
    assert HierarchicalClassifier(tree, batch_size=48, **FAST).fit(Xs, y).net_.batch_size == 48
    stream = HierarchicalClassifier(tree, **FAST).partial_fit(Xs, y)  # partial_fit knows the call's rows
    assert stream.config_.batch_size == 32


def test_auto_predicts_in_batches_of_256_and_continues_with_the_fitted_batch(data, tmp_path):
    from hiclass_parallel.estimators.io._persistence import load_classifier, save_classifier

    _, Xs, y, tree = data
    big = sp.vstack([Xs] * 3).tocsr()
    clf = HierarchicalClassifier(tree, flat_term=None, **FAST).fit(Xs, y)  # continuing would drop the term
    sizes = []
    clf._per_batch(big, lambda scores: sizes.append(scores.shape[0]) or scores)
    assert sizes == [256, big.shape[0] - 256]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "auto" unchanged: nothing to hand over
        clf.partial_fit(Xs, y)
    assert clf.net_.batch_size == 32
    clf.set_params(batch_size=16).partial_fit(Xs, y)
    assert clf.net_.batch_size == 16
    save_classifier(clf, tmp_path / "m")
    assert load_classifier(tmp_path / "m").config_.batch_size == clf.config_.batch_size == 32
