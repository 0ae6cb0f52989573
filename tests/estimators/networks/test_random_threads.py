"""``random_state`` in threads: a seeded fit draws from its own generator, never torch's global one.

Two fits in two threads with one ``random_state`` give the model a fit alone gives, and a fit
in another thread leaves this thread's ``torch.rand`` stream where it was: each draw here
equals the draw without the fit.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from torch import nn
from support import sparse_rows

from hiclass_parallel import Tree
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier


def _dense():
    X, y, tree = make_hierarchical_classification(n_samples=300, n_features=8, branching=3, depth=2, random_state=0)
    # dropout, shuffling and initialisation all draw; flat term and calibration as by default
    return X, y, tree, {"max_epochs": 3, "batch_size": 32, "module__dropout": 0.3, "module__hidden_units": 16}


def _sparse():
    # the fused C step with the sampled softmax (a seed drawn per step) over a wide top group
    rng = np.random.default_rng(0)
    n = 120
    parents = np.full(n, -1)
    parents[40:] = rng.integers(0, 40, n - 40)
    X = sparse_rows(400, 30, density=0.2, seed=0)
    return X, rng.integers(0, n, 400), Tree.from_parents(parents), {
        "max_epochs": 3, "batch_size": 64, "softmax_sample": 10, "module__hidden_units": 16}


def _sparse_dropout():
    # SparseMLP on the torch route: input dropout on the non-zeros and dropout on the hidden layer
    X, y, tree, params = _sparse()
    return X, y, tree, dict(params, softmax_sample=None, module__input_dropout=0.2, module__dropout=0.2)


CASES = {"dense-dropout": _dense, "sparse-sampled-softmax": _sparse, "sparse-dropout": _sparse_dropout}


def _in_threads(*jobs):
    """Run the jobs in threads started together; their results (or the first error) in order."""
    start = threading.Barrier(len(jobs))
    results: list = [None] * len(jobs)

    def run(i, job):
        start.wait()
        try:
            results[i] = job()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a fit did not finish"
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_fits_in_threads_equal_a_fit_alone(case, one_torch_thread):
    X, y, tree, params = CASES[case]()

    def fit():
        return HierarchicalClassifier(tree, random_state=0, **params).fit(X, y)

    alone = fit()
    if case == "sparse-sampled-softmax":
        assert alone.config_.step_engine == "fused" and alone.config_.softmax_sample == 10
    together = _in_threads(fit, fit)
    want = alone.decision_function(X)
    for clf in together:
        np.testing.assert_array_equal(clf.decision_function(X), want)
        for a, b in zip(clf.net_.module_.parameters(), alone.net_.module_.parameters()):
            assert torch.equal(a, b)


def test_a_fit_in_another_thread_leaves_this_threads_stream_alone(one_torch_thread):
    X, y, tree, params = _dense()
    torch.manual_seed(123)
    reference = torch.rand(20_000)
    torch.manual_seed(123)
    done = threading.Event()

    def fit():
        try:
            return HierarchicalClassifier(tree, random_state=0, **params).fit(X, y)
        finally:
            done.set()

    drawn = []

    def draw():  # this thread's draws, one at a time, all through the other thread's fit
        while not done.is_set() and len(drawn) < reference.numel() - 1:
            drawn.append(torch.rand(1))
        drawn.append(torch.rand(1))

    _in_threads(fit, draw)
    assert len(drawn) > 1
    np.testing.assert_array_equal(torch.cat(drawn).numpy(), reference[:len(drawn)].numpy())


def test_predict_leaves_torchs_stream_alone(one_torch_thread):
    X, y, tree, params = _dense()
    clf = HierarchicalClassifier(tree, random_state=0, **params).fit(X, y)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    clf.predict(X), clf.predict_proba(X)
    assert torch.equal(torch.get_rng_state(), before)


def test_loading_draws_nothing_from_torchs_stream_even_in_another_thread(tmp_path, one_torch_thread):
    # fork_rng would save and put back the global state around the load: a draw another thread
    # made meanwhile would be undone. The load draws from a private generator instead.
    pytest.importorskip("safetensors")
    from hiclass_parallel.estimators import load_classifier, save_classifier

    X, y, tree, params = _dense()
    folder = save_classifier(HierarchicalClassifier(tree, random_state=0, **params).fit(X, y), tmp_path / "m")
    torch.manual_seed(5)
    reference = torch.rand(1000)
    torch.manual_seed(5)
    drawn = []

    def draw():  # spread over the loads
        for _ in range(200):
            drawn.append(torch.rand(5))
            time.sleep(0.002)

    def load():
        for _ in range(5):
            load_classifier(folder)

    _in_threads(load, draw)
    np.testing.assert_array_equal(torch.cat(drawn).numpy(), reference.numpy())


class _OwnModule(nn.Module):
    """A module class of the user's: its layers and dropout draw from torch's global generator."""

    def __init__(self, n_features, n_outputs):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(n_features, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, n_outputs))

    def forward(self, X):
        return self.layers(X)


def test_a_module_of_the_users_is_seeded_through_torchs_generator_and_it_is_put_back(one_torch_thread):
    X, y, tree, params = _dense()
    params = {k: v for k, v in params.items() if not k.startswith("module__")}
    torch.manual_seed(9)
    before = torch.get_rng_state()
    fits = [HierarchicalClassifier(tree, module=_OwnModule, random_state=0, **params).fit(X, y) for _ in range(2)]
    assert torch.equal(torch.get_rng_state(), before)
    np.testing.assert_array_equal(fits[0].decision_function(X), fits[1].decision_function(X))
    # two in threads: the lock around such fits keeps each one's stream its own
    for clf in _in_threads(*[lambda: HierarchicalClassifier(tree, module=_OwnModule, random_state=0,
                                                            **params).fit(X, y)] * 2):
        np.testing.assert_array_equal(clf.decision_function(X), fits[0].decision_function(X))


@pytest.mark.parametrize("case", ["dense-dropout", "sparse-sampled-softmax"])
def test_predict_from_several_threads_gives_each_the_answers_of_one(case, one_torch_thread):
    X, y, tree, params = CASES[case]()
    clf = HierarchicalClassifier(tree, random_state=0, **params).fit(X, y)
    want, proba = clf.predict(X), clf.predict_proba(X)
    for got in _in_threads(*[lambda: (clf.predict(X), clf.predict_proba(X))] * 3):
        np.testing.assert_array_equal(got[0], want)
        np.testing.assert_array_equal(got[1], proba)
