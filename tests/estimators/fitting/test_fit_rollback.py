"""A failed or interrupted fit changes nothing; a diverging ``partial_fit`` says so.

Every fit that raises (a non-finite loss, a callback's error, Ctrl-C) leaves the estimator as it
was before the call: the net's weights, optimizer state and history, the prototypes, the
calibrator and the predictions. Ctrl-C raises ``KeyboardInterrupt`` out of ``fit`` and
``partial_fit`` (skorch's own loop swallows it), while a callback's ``KeyboardInterrupt`` still
stops training as in skorch. Ctrl-C is pressed here by a callback that runs the SIGINT handler,
as Python does when the signal arrives, never by a real signal (``tests/test_cli_interrupt.py``
sends one to the command line).
"""

from __future__ import annotations

import math
import signal
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from skorch.callbacks import Callback
from support import Pairs

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import (
    ClassTextClassifier,
    HierarchicalClassifier,
    MultiLabelHierarchicalClassifier,
    NonFiniteLossError,
)
from hiclass_parallel.estimators.fitting._guards import warn_if_worse
from hiclass_parallel.estimators.answer._dense_prototypes import GaussianPrototypes
from hiclass_parallel.estimators.answer._prototypes import ClassPrototypes
from hiclass_parallel.exceptions import DivergenceWarning


def press_ctrl_c():
    """What Ctrl-C does to the main thread, without a signal: Python's SIGINT handler runs."""
    signal.getsignal(signal.SIGINT)(signal.SIGINT, sys._getframe())


class Raise(Callback):
    """Raises ``error`` (``None``: presses Ctrl-C) at the end of batch ``batch`` of the
    ``epoch``-th epoch of a call (counted from 1), once armed: after that batch's weights were
    updated."""

    def __init__(self, error: type[BaseException] | None = None, epoch: int = 1, batch: int = 2,
                 armed: bool = True):
        self.error, self.epoch, self.batch, self.armed = error, epoch, batch, armed

    def on_train_begin(self, net, **kwargs):
        self.first_, self.seen_ = len(net.history), 0

    def on_batch_end(self, net, training=False, **kwargs):
        if not training or not self.armed:
            return
        if len(net.history) - self.first_ == self.epoch:
            self.seen_ += 1
            if self.seen_ == self.batch:
                if self.error is None:
                    press_ctrl_c()
                raise self.error("raised by the test's callback")


@pytest.fixture(scope="module")
def data():
    X, y, tree = make_hierarchical_classification(n_samples=300, n_features=6, branching=2, depth=2, random_state=0)
    return X.astype(np.float32), y, tree


def _inputs(X, sparse):
    """Dense rows (MLP, GaussianPrototypes) or non-negative sparse ones (SparseMLP, ClassPrototypes)."""
    return sp.csr_matrix(np.abs(X)) if sparse else X


def _fitted(data, sparse, **kw):
    X, y, tree = data
    params = {"max_epochs": 3, "batch_size": 32, "random_state": 0, "module__hidden_units": 16,
              "calibration": "beta", "calibration_size": 100, "callbacks": [Raise(armed=False)], **kw}
    return HierarchicalClassifier(tree, **params).fit(_inputs(X, sparse), y)


def _arm(clf, **kw):
    """The fitted net's own copy of the test callback, armed."""
    callback = next(cb for _, cb in clf.net_.callbacks_ if isinstance(cb, Raise))
    vars(callback).update({"armed": True, **kw})


def _prototype_arrays(prototypes):
    if isinstance(prototypes, ClassPrototypes):
        return {"sums": prototypes.sums.toarray()}
    assert isinstance(prototypes, GaussianPrototypes)
    return {"sums": prototypes.sums.copy(), "counts": prototypes.counts.copy(), "squares": prototypes.squares.copy()}


def _state(clf, X):
    """Everything a fit could change, copied."""
    net = clf.net_
    return {
        "net": net,
        "weights": {k: v.clone() for k, v in net.module_.state_dict().items()},
        "optimizer": {id(p): {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
                      for p, s in net.optimizer_.state.items()},
        "lr": [g["lr"] for g in net.optimizer_.param_groups],
        "history": len(net.history),
        "prototypes": clf.answer_.terms["prototypes"],
        "prototype_arrays": _prototype_arrays(clf.answer_.terms["prototypes"]),
        "weight": (clf.answer_.weights["prototypes"], clf.answer_.scale),
        "calibrator": clf.answer_.calibrator,
        "predict": clf.predict(X),
        "proba": clf.predict_proba(X),
        "confidence": clf.predict_confidence(X),
    }


def _assert_unchanged(clf, X, before):
    after = _state(clf, X)
    # the reproducers first: the failed call's rows in the prototypes, the predictions
    assert after["prototypes"] is before["prototypes"] and after["weight"] == before["weight"]
    for key, value in before["prototype_arrays"].items():
        np.testing.assert_array_equal(after["prototype_arrays"][key], value, err_msg=key)
    np.testing.assert_array_equal(after["predict"], before["predict"])
    np.testing.assert_array_equal(after["proba"], before["proba"])
    assert after["net"] is before["net"] and after["history"] == before["history"]
    assert after["weights"].keys() == before["weights"].keys()
    for key, value in before["weights"].items():
        assert torch.equal(after["weights"][key], value), key
    assert after["optimizer"].keys() == before["optimizer"].keys()
    for p, state in before["optimizer"].items():
        for key, value in state.items():
            now = after["optimizer"][p][key]
            assert torch.equal(now, value) if torch.is_tensor(value) else now == value, key
    assert after["lr"] == before["lr"]
    assert after["calibrator"] is before["calibrator"] and before["calibrator"] is not None
    np.testing.assert_array_equal(after["confidence"], before["confidence"])


# ---------------------------------------------------------------------------- a failed call changes nothing
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_partial_fit_with_a_non_finite_loss_changes_nothing_and_a_retry_adds_no_rows(data, sparse, one_torch_thread):
    X, y, _ = data
    Xs = _inputs(X, sparse)
    clf = _fitted(data, sparse)
    before = _state(clf, Xs)
    clf.set_params(lr=1e30)  # one Adam step of 1e30: the next batch's scores overflow
    for _ in range(2):  # each retry used to add the call's rows to the prototypes once more
        with pytest.raises(NonFiniteLossError, match=r"loss became nan .*\(lr=1e\+30\)"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the changed lr is handed over; the calibrator goes
                clf.partial_fit(Xs, y)
        _assert_unchanged(clf, Xs, before)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_a_callback_error_mid_epoch_changes_nothing(data, sparse, one_torch_thread):
    X, y, _ = data
    Xs = _inputs(X, sparse)
    clf = _fitted(data, sparse)
    before = _state(clf, Xs)
    _arm(clf, error=RuntimeError, batch=3)  # after two batches' updates of the weights
    with pytest.raises(RuntimeError, match="raised by the test's callback"):
        clf.partial_fit(Xs, y)
    _assert_unchanged(clf, Xs, before)
    # A warm start over several epochs, failing in the second: not even the first epoch stays.
    _arm(clf, error=RuntimeError, epoch=2, batch=2)
    clf.set_params(warm_start=True, max_epochs=4)
    with pytest.raises(RuntimeError, match="raised by the test's callback"):
        clf.fit(Xs, y)
    _assert_unchanged(clf, Xs, before)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_an_interrupted_partial_fit_raises_and_changes_nothing(data, sparse, one_torch_thread):
    X, y, _ = data
    Xs = _inputs(X, sparse)
    clf = _fitted(data, sparse)
    before = _state(clf, Xs)
    _arm(clf, error=None, batch=3)
    with pytest.raises(KeyboardInterrupt):
        clf.partial_fit(Xs, y)
    _assert_unchanged(clf, Xs, before)
    # and the model trains on afterwards, as if the interrupted call had never been made
    _arm(clf, armed=False)
    with pytest.warns(UserWarning, match="drops the answer model's calibrator"):
        clf.partial_fit(Xs, y)
    assert len(clf.net_.history) == before["history"] + 1


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_an_interrupted_fit_raises_and_fits_nothing(data, sparse, one_torch_thread):
    X, y, tree = data
    Xs = _inputs(X, sparse)
    # Interrupted in its second epoch, before the calibrator and the prototypes are fitted.
    clf = HierarchicalClassifier(tree, max_epochs=3, batch_size=32, random_state=0, module__hidden_units=16,
                                 calibration="beta", calibration_size=100, callbacks=[Raise(epoch=2)])
    with pytest.raises(KeyboardInterrupt):
        clf.fit(Xs, y)
    assert not [k for k in vars(clf) if k.endswith("_")]  # unfitted: no net_, calibrator_, prototypes_
    # A fitted model refitted and interrupted keeps the first fit, all of it.
    fitted = _fitted(data, sparse)
    before = _state(fitted, Xs)
    fitted.set_params(callbacks=[Raise(epoch=2)])
    with pytest.raises(KeyboardInterrupt):
        fitted.fit(Xs, y)
    _assert_unchanged(fitted, Xs, before)


def test_every_estimator_lets_the_interrupt_out(data, one_torch_thread):
    X, y, tree = data
    fast = {"max_epochs": 3, "batch_size": 32, "random_state": 0, "module__hidden_units": 8}
    multi = MultiLabelHierarchicalClassifier(tree, callbacks=[Raise(epoch=2)], **fast)
    with pytest.raises(KeyboardInterrupt):
        multi.fit(X, [[label] for label in y])
    assert not hasattr(multi, "net_")

    streamed = HierarchicalClassifier(tree, callbacks=[Raise(epoch=2)], **fast)
    with pytest.raises(KeyboardInterrupt):
        streamed.fit(Pairs(X, y))
    assert not hasattr(streamed, "net_")


def test_class_text_fit_interrupted_keeps_the_previous_model(one_torch_thread):
    from sklearn.feature_extraction.text import TfidfVectorizer

    from hiclass_parallel import Tree

    tree = Tree.from_edges([("dog", "animal"), ("cat", "animal"), ("oak", "plant")])
    docs = ["a barking dog", "a dog that barks", "a purring cat", "a cat on the mat", "an oak tree", "old oak"] * 10
    labels = ["dog", "dog", "cat", "cat", "oak", "oak"] * 10
    clf = HierarchicalClassifier(tree, max_epochs=3, batch_size=8, random_state=0, callbacks=[Raise(armed=False)])
    est = ClassTextClassifier(TfidfVectorizer(), clf, class_text={"dog": "dog", "cat": "cat", "oak": "oak"})
    est.fit(docs, labels)
    fitted = dict(vars(est))
    before = est.predict(docs)
    est.set_params(classifier__callbacks=[Raise(epoch=2)], class_text={"dog": "hound", "cat": "kitten"})
    with pytest.raises(KeyboardInterrupt):
        est.fit(docs[:30], labels[:30])
    now = {k: v for k, v in vars(est).items() if k.endswith("_")}
    assert now.keys() == {k for k in fitted if k.endswith("_")}
    assert all(value is fitted[key] for key, value in now.items())
    np.testing.assert_array_equal(est.predict(docs), before)


def test_a_callbacks_keyboard_interrupt_still_just_stops_training(data, one_torch_thread):
    X, y, tree = data
    # skorch's way for a callback to end training (EarlyStopping's): the fit ends, fitted.
    clf = HierarchicalClassifier(tree, max_epochs=5, batch_size=32, random_state=0, module__hidden_units=8,
                                 callbacks=[Raise(KeyboardInterrupt, epoch=2)]).fit(X, y)
    assert len(clf.net_.history) == 2 and clf.predict(X[:3]).shape == (3, 2)
    early = HierarchicalClassifier(tree, max_epochs=50, early_stopping=True, n_iter_no_change=1, tol=10.0,
                                   random_state=0, module__hidden_units=8).fit(X, y)
    assert len(early.net_.history) < 50


# ---------------------------------------------------------------------------- a diverging partial_fit warns
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_partial_fit_that_wrecks_the_model_warns(data, sparse, one_torch_thread):
    X, y, tree = data
    Xs = _inputs(X, sparse)
    clf = HierarchicalClassifier(tree, max_epochs=3, batch_size=32, random_state=0, module__hidden_units=16).fit(Xs, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)
        clf.partial_fit(Xs, y)  # a normal step: no warning
        clf.partial_fit(Xs[:40], y[:40])  # on a few rows too
    clf.set_params(lr=1e12)
    with pytest.warns(DivergenceWarning, match=r"much worse on the rows it trained on: their mean loss rose from "
                                               r".* \(lr=1e\+12\)"):
        clf.partial_fit(Xs, y)


def test_divergence_criterion_needs_both_a_doubling_and_log_2_nats():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)
        warn_if_worse(1.0, 1.5, 0.01)  # a small rise
        warn_if_worse(0.01, 0.05, 0.01)  # a tiny loss multiplied, still tiny
        warn_if_worse(5.0, 6.5, 0.01)  # a large loss up by more than log 2, but far from doubled
        warn_if_worse(None, 9.0, 0.01)  # nothing measured (a stream)
    for after in (0.5 * 2 + math.log(2) + 0.01, math.inf, math.nan):
        with pytest.warns(DivergenceWarning):
            warn_if_worse(0.5, after, 0.01)
