"""The engines as strategies: the configuration asks each engine's ``refusal`` once, in order of
preference, and records the first that accepts; the net holds the engine and delegates to it,
with no engine branch of its own (an engine the net has never heard of trains a fit)."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import torch
from support import sparse_rows

from hiclass_parallel import Tree
from hiclass_parallel.estimators import MLP, HierarchicalClassifier, LazyAdam, SparseMLP
from hiclass_parallel.estimators.networks import engines
from hiclass_parallel.estimators.networks._net import TreeNet
from hiclass_parallel.estimators.networks.engines import (
    DeviceEngine, EngineChoice, EngineRequest, FusedEngine, TorchEngine, choose, torch_step,
)
from hiclass_parallel.estimators.networks.engines import _fused
from hiclass_parallel.losses import HierarchicalCrossEntropy, PathLocalCrossEntropy

#: A small fit: 16 sparse rows over a 20-class tree, two batches an epoch.
SMALL = dict(max_epochs=2, random_state=0, batch_size=8, module__hidden_units=8)


def _data():
    rng = np.random.default_rng(0)
    tree = Tree.from_parents(np.r_[-1, -1, rng.integers(0, 2, 6), rng.integers(2, 8, 12)])
    return sparse_rows(16, 30, density=0.15, seed=0), rng.integers(0, tree.n_classes, 16), tree


def _fit(X, y, tree, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the small data's own warnings (labels at internal nodes, ...)
        return HierarchicalClassifier(tree, **{**SMALL, **params}).fit(X, y)


def _request(**changes):
    base = dict(path_local=True, module=SparseMLP, module_args={}, criterion=PathLocalCrossEntropy,
                criterion_args={}, optimizer=LazyAdam, device="cpu", sparse_input=True)
    return EngineRequest(**{**base, **changes})


def test_each_engine_is_asked_once_in_order_and_the_reason_is_its_refusal(monkeypatch):
    asked = []
    for engine in (DeviceEngine, FusedEngine):
        real = engine.refusal.__func__
        monkeypatch.setattr(engine, "refusal", classmethod(
            lambda cls, request, real=real: asked.append(cls.name) or real(cls, request)))
    # the CPU, a module neither kernel serves: both refuse, the fused step's refusal is the reason
    choice = choose(_request(module=MLP, sparse_input=False))
    assert asked == ["device", "fused"]
    assert choice == EngineChoice("torch", "the module is MLP, not SparseMLP", "optimizer", "the step is not fused")
    # full training: every engine but torch refuses it
    assert DeviceEngine.refusal(_request(path_local=False)) == FusedEngine.refusal(_request(path_local=False)) \
        == "full training runs skorch's step"
    assert choose(_request(path_local=False, criterion=HierarchicalCrossEntropy)).step_reason \
        == "full training runs skorch's step"
    # on CUDA, the device step's refusal is the reason, whatever the fused step says
    assert choose(_request(device="cuda")).step_reason in (
        "on CUDA the device step cannot run: CUDA is not available",
        "on CUDA the device step cannot run: Triton is not installed (or HICLASS_PARALLEL_TRITON=0)")


@pytest.mark.skipif(not _fused.native.available(), reason="the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")
def test_an_engines_refusal_is_the_only_place_that_keeps_it_out(monkeypatch):
    X, y, tree = _data()
    monkeypatch.setattr(FusedEngine, "refusal", classmethod(lambda cls, request: "refused here, and only here"))
    refused = _fit(X, y, tree)
    assert (refused.config_.step_engine, refused.config_.step_engine_reason) == ("torch", "refused here, and only here")
    assert refused.net_.step_engine_ == "torch"
    # Its refusal lifted for a module it does not serve: the configuration chooses it (nothing
    # else decides), and each batch is then refused by the engine's own batch check, counted.
    monkeypatch.setattr(FusedEngine, "refusal", classmethod(lambda cls, request: None))
    mlp = _fit(X.toarray(), y, tree, module=MLP, max_epochs=1)
    assert mlp.config_.step_engine == "fused" and mlp.net_.step_engine_ == "fused"
    n_steps = sum(len(epoch["batches"]) for epoch in mlp.net_.history)
    assert mlp.net_.step_fallbacks_ == n_steps > 0
    assert mlp.net_.step_fallback_reason_ == "the module is MLP, not SparseMLP"


def test_the_net_has_no_engine_branch_an_unknown_engine_trains_a_fit(monkeypatch):
    """An engine TreeNet has never heard of, put first in the order of preference: the
    configuration records it and the net runs every training step and epoch through it."""
    calls = {"refusal": 0, "begin": 0, "step": 0, "epoch": 0}
    steps_of = {}  # id(net): its training steps

    class Counting(TorchEngine):
        name = "counting"

        @classmethod
        def refusal(cls, request):
            calls["refusal"] += 1
            return None if request.path_local else "path-local only"

        @classmethod
        def choice(cls, request, refusals):
            return EngineChoice("counting", "counted", "optimizer", "the optimizer's step")

        def begin(self, net):
            calls["begin"] += 1
            return super().begin(net)

        def step(self, net, batch, **fit_params):
            calls["step"] += 1
            steps_of[id(net)] = steps_of.get(id(net), 0) + 1
            return torch_step(net, batch, training=True)

        def epoch(self, net, iterator, prefix, step_fn, **fit_params):
            calls["epoch"] += 1
            return super().epoch(net, iterator, prefix, step_fn, **fit_params)

    monkeypatch.setattr(engines, "ENGINES", (Counting, *engines.ENGINES))
    X, y, tree = _data()
    clf = _fit(X, y, tree)
    net = clf.net_
    assert (clf.config_.step_engine, clf.config_.step_engine_reason) == ("counting", "counted")
    assert type(net.engine_) is Counting and net.step_engine_ == "counting"
    # every training call (the fit may train more than one net: held-out rows) began on it,
    # ran each epoch and each training step through it
    assert calls["refusal"] >= 1 and calls["begin"] >= 1
    assert calls["epoch"] == SMALL["max_epochs"] * calls["begin"]
    assert steps_of[id(net)] == sum(len(epoch["batches"]) for epoch in net.history) == 4
    assert calls["step"] == sum(steps_of.values())
    # and the net's own code names no engine
    source = inspect.getsource(TreeNet)
    for name in ("fused", "device", "torch"):
        assert f'== "{name}"' not in source and f"'{name}'" not in source


def test_a_built_net_the_engine_refuses_trains_through_torch_with_the_reason(monkeypatch):
    """The built net's check is the engine's ``begin``: a refusal there puts the training call
    on torch, reported on the net."""
    class Refusing(TorchEngine):
        name = "refusing"

        @classmethod
        def refusal(cls, request):
            return None

        @classmethod
        def choice(cls, request, refusals):
            return EngineChoice("refusing", "chosen", "optimizer", "-")

        def begin(self, net):
            return "the built net is not for me"

        def step(self, net, batch, **fit_params):  # pragma: no cover - never runs: begin refused
            raise AssertionError("a refused engine stepped")

    monkeypatch.setattr(engines, "ENGINES", (Refusing, *engines.ENGINES))
    X, y, tree = _data()
    clf = _fit(X, y, tree, max_epochs=1)
    assert clf.config_.step_engine == "refusing"
    assert type(clf.net_.engine_) is TorchEngine and clf.net_.step_engine_ == "torch"
    assert clf.net_.step_fallback_reason_ == clf.net_.update_fallback_ == "the built net is not for me"


def test_an_unknown_engine_name_is_named():
    with pytest.raises(ValueError, match="step_engine='warp' is not an engine: choose one of"):
        engines.engine_named("warp")


def test_engines_pickle_without_what_a_training_call_set_up():
    import pickle

    engine = FusedEngine()
    engine._plans = object()  # an epoch's planning thread, say
    assert pickle.loads(pickle.dumps(engine))._plans is None
