"""Dense input on the fused path-local step: a dense float32 batch reaches the C kernel as CSR
with every column of every row (``dense_csr``), and the step must equal the torch route of the
same module on the same dense batch (``SparseMLP.encode`` / ``scorer``, ``PathLocalCrossEntropy``,
autograd, ``LazyAdam.step``): loss, gradients and updated weights, on random trees with shuffled
ids, both semantics, with sample weights. Then the classifier: dense ``X`` trains ``SparseMLP``
on the fused step by default, says so in ``config_``, trains as the torch route does, and its
fitted model predicts, saves, loads and exports.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from hiclass_parallel.estimators import MLP, HierarchicalClassifier, LazyAdam, SparseMLP
from hiclass_parallel.estimators.networks import _native_path_step
from hiclass_parallel.estimators.networks.engines._fused import FusedEngine, dense_csr, fused_step
from hiclass_parallel.losses import PathLocalCrossEntropy
from hiclass_parallel.ops.groups import n_outputs

pytestmark = pytest.mark.skipif(not _native_path_step.available(),
                                reason="the fused step's C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")

F = 24


def _case(random_tree, seed: int, stop: bool, semantics: str, level: float, B: int = 40, n: int = 80, H: int = 8,
          activation: type | None = None):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)
    torch.manual_seed(seed)
    module = SparseMLP(F, n_outputs(tree, "sibling", stop), hidden_units=H, activation=activation)
    with torch.no_grad():
        module.head.bias.weight.normal_()  # zero at the start: give the bias gradient something to check
    criterion = PathLocalCrossEntropy(tree, stop=stop, semantics=semantics, level_contrast=level)
    module.train()
    criterion.train()
    X = torch.randn(B, F, generator=torch.Generator().manual_seed(seed))
    X[:, 3] = 0.0  # a feature absent from the whole batch: its row still gets its (zero) gradient
    X[5] = 0.0  # an all-zero row
    y = torch.as_tensor(rng.integers(-1, n, B))  # -1: unlabelled rows
    weight = torch.as_tensor(rng.uniform(0.0, 2.0, B), dtype=torch.float32)
    weight[rng.integers(0, B, 3)] = 0.0
    return module, criterion, X, y, weight


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).clone() for k, p in module.named_parameters()}


def test_a_dense_batch_becomes_csr_of_every_column():
    X = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]])
    csr = dense_csr(X)
    assert csr.crow_indices().tolist() == [0, 3, 6] and csr.col_indices().tolist() == [0, 1, 2] * 2
    assert torch.equal(csr.to_dense(), X)
    assert dense_csr(torch.zeros(0, 3)).crow_indices().tolist() == [0]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("stop", "semantics", "level", "B", "n"),
                         [(False, "partial", 0.0, 40, 80), (True, "partial", 0.3, 40, 80),
                          (True, "terminal", 0.3, 160, 400), (True, "terminal", 0.0, 40, 80)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("activation", [None, torch.nn.ReLU])
def test_dense_batches_on_the_fused_step_equal_the_torch_route(random_tree, seed, stop, semantics, level, B, n,
                                                               weighted, activation):
    module, criterion, X, y, weight = _case(random_tree, seed, stop, semantics, level, B=B, n=n,
                                            activation=activation)
    kwargs = {"sample_weight": weight} if weighted else {}
    assert FusedEngine.batch_refusal(module, criterion, X) is None
    if activation is not None:  # the ReLU's mask does something
        assert 0.1 < float((module.encode(X) > 0).float().mean()) < 0.9
    loss = criterion(module.scorer(module.encode(X)), y, **kwargs)
    loss.backward()
    reference = _grads(module)
    assert module.input.embedding.weight.grad.layout == torch.strided  # the torch route's gradient is dense
    module.zero_grad(set_to_none=True)
    out = fused_step(module, criterion, X, y, **kwargs)
    assert float(out["loss"]) == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    torch.testing.assert_close(out["y_pred"], module.encode(X).detach(), rtol=1e-5, atol=1e-6)
    for name, grad in _grads(module).items():
        torch.testing.assert_close(grad, reference[name], rtol=1e-4, atol=1e-6, msg=name)
    # every input row is listed, the zero feature's too
    assert module.input.embedding.weight.grad.indices()[0].tolist() == list(range(F))


def _optimizer(module: SparseMLP) -> LazyAdam:
    # the classifier's default groups of SparseMLP (SparseMLP.lazy_adam_groups)
    named = dict(module.named_parameters())
    groups = [{"params": [named[name]], **options} for name, options in SparseMLP.lazy_adam_groups]
    rest = [p for name, p in named.items() if name not in dict(SparseMLP.lazy_adam_groups)]
    return LazyAdam(groups + [{"params": rest}], lr=0.01)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("stop", "semantics"), [(False, "partial"), (True, "terminal")])
@pytest.mark.parametrize("activation", [None, torch.nn.ReLU])
def test_the_fused_update_of_dense_batches_equals_the_torch_route_then_the_optimizer(random_tree, seed, stop,
                                                                                      semantics, activation):
    """Three weighted steps: the fused step applying LazyAdam's update in the kernel gives the
    weights and optimizer state of the torch route (autograd's dense input gradient) followed
    by ``LazyAdam.step``, the input layer's one second moment per row included."""
    module, criterion, X, y, weight = _case(random_tree, seed, stop, semantics, 0.3, B=160, n=400, H=16,
                                            activation=activation)
    other = copy.deepcopy(module)
    fused_opt, torch_opt = _optimizer(module), _optimizer(other)
    rng = np.random.default_rng(seed)
    for step in range(3):
        X = torch.randn(160, F, generator=torch.Generator().manual_seed(100 * seed + step))
        y = torch.as_tensor(rng.integers(-1, 400, 160))
        fused_opt.zero_grad(set_to_none=True)
        fused_opt.step(lambda: fused_step(module, criterion, X, y, fused_opt, sample_weight=weight)["loss"])
        assert module.input.embedding.weight.grad is None  # updated inside the step

        def closure():
            loss = criterion(other.scorer(other.encode(X)), y, sample_weight=weight)
            loss.backward()
            return loss

        torch_opt.zero_grad(set_to_none=True)
        torch_opt.step(closure)
    for (name, p), q in zip(module.named_parameters(), other.parameters()):
        # The two routes sum the gradients in different orders, and the output layer's bfloat16
        # first moment can round two floats a few ulps apart to neighbouring values: the weights
        # agree to a small fraction of one step (lr 0.01).
        torch.testing.assert_close(p, q, rtol=1e-5, atol=2e-5, msg=name)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            exact = fused_opt.state[p][key].dtype != torch.bfloat16
            torch.testing.assert_close(fused_opt.state[p][key].float(), torch_opt.state[q][key].float(),
                                       rtol=1e-5 if exact else 2**-7, atol=1e-7, msg=f"{name} {key}")
    assert fused_opt.state[module.input.embedding.weight]["exp_avg_sq"].shape == (F, 1)


def _dense_data(seed: int = 0):
    from hiclass_parallel import Tree

    rng = np.random.default_rng(seed)
    tree = Tree.from_parents(np.r_[-1, -1, rng.integers(0, 2, 10), rng.integers(2, 12, 30)])
    y = rng.integers(0, tree.n_classes, 300)
    X = rng.normal(size=(tree.n_classes, 16))[y] + rng.normal(scale=0.5, size=(300, 16))
    X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)  # normalised, as sentence embeddings
    return tree, X, y


def _fused_and_torch_fits(tree, X, y, **params):
    """The same classifier fitted with the C kernel available (the fused step) and without it
    (the torch route): 3 epochs, batches of 64, seed 0."""
    fits = []
    for available in (True, False):
        with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
            warnings.simplefilter("ignore")
            if not available:
                mp.setattr("hiclass_parallel.estimators.networks.engines._fused.native.available", lambda: False)
            fits.append(HierarchicalClassifier(tree, max_epochs=3, random_state=0, batch_size=64, **params).fit(X, y))
    return tuple(fits)


def test_dense_x_trains_sparse_mlp_fused_by_default_as_the_torch_route_does():
    """Normalised dense rows (sentence embeddings) default to SparseMLP on the fused step, which
    trains as the torch route of the same model does; other dense X keeps MLP, and each
    configuration says why."""
    tree, X, y = _dense_data()
    fused, plain = _fused_and_torch_fits(tree, X, y)
    assert fused.config_.module_class is SparseMLP and fused.config_.step_engine == "fused"
    assert "length 1" in fused.config_.step_engine_reason and "dense batches" in fused.config_.step_engine_reason
    assert fused.net_.step_engine_ == "fused" and fused.net_.step_fallbacks_ == 0
    assert fused.config_.update_engine == "fused"
    assert plain.config_.module_class is SparseMLP and plain.net_.step_engine_ == "torch"
    # the same training, step for step, within float tolerance
    np.testing.assert_allclose(fused.net_.history[:, "train_loss"], plain.net_.history[:, "train_loss"], rtol=1e-4)
    np.testing.assert_array_equal(fused.predict(X[:50]), plain.predict(X[:50]))
    # module=MLP keeps the torch route, and says why
    mlp = HierarchicalClassifier(tree, max_epochs=1, random_state=0, module=MLP).fit(X, y)
    assert mlp.config_.step_engine == "torch" and "MLP" in mlp.config_.step_engine_reason
    # rows not of length 1 (numeric features): MLP by default, and why; SparseMLP when asked, fused
    raw = HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(3 * X, y)
    assert raw.config_.module_class is MLP and raw.config_.step_engine == "torch"
    assert "rows not all of length 1" in raw.config_.step_engine_reason
    asked = HierarchicalClassifier(tree, max_epochs=1, random_state=0, module=SparseMLP).fit(3 * X, y)
    assert asked.config_.step_engine == "fused" and asked.net_.step_fallbacks_ == 0
    # hidden layers only MLP builds keep MLP on normalised rows too, and say why
    layers = HierarchicalClassifier(tree, max_epochs=1, random_state=0, module__hidden_units=(8, 8)).fit(X, y)
    assert layers.config_.module_class is MLP and "module__hidden_units=(8, 8)" in layers.config_.step_engine_reason
    # a torch X is checked on its own terms
    assert HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(
        torch.from_numpy(X), y).config_.module_class is SparseMLP


def test_a_relu_sparse_mlp_on_raw_dense_x_trains_fused_as_the_torch_route_does():
    """``SparseMLP(activation=nn.ReLU)`` asked for on dense rows not of length 1 trains on the
    fused step (no batch falls back) as the torch route of the same model does."""
    tree, X, y = _dense_data()
    fused, plain = _fused_and_torch_fits(tree, 3 * X, y, module=SparseMLP, module__activation=torch.nn.ReLU)
    assert fused.config_.step_engine == "fused" and fused.net_.step_fallbacks_ == 0
    assert isinstance(fused.net_.module_.activation, torch.nn.ReLU)
    assert plain.net_.step_engine_ == "torch"
    np.testing.assert_allclose(fused.net_.history[:, "train_loss"], plain.net_.history[:, "train_loss"], rtol=1e-4)
    np.testing.assert_array_equal(fused.predict(X[:50]), plain.predict(X[:50]))


def test_a_dense_fused_model_predicts_saves_loads_and_exports(tmp_path):
    pytest.importorskip("safetensors", reason="saving without pickle needs safetensors (the 'persist' extra)")
    from hiclass_parallel.estimators import export_program, load_classifier, save_classifier

    tree, X, y = _dense_data(1)
    clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0, batch_size=64).fit(X, y)
    assert clf.net_.step_engine_ == "fused"
    pred, proba = clf.predict(X[:40]), clf.predict_proba(X[:40])
    assert proba.shape == (40, len(clf.classes_)) and np.all((proba >= 0) & (proba <= 1 + 1e-6))
    save_classifier(clf, tmp_path / "model")
    loaded = load_classifier(tmp_path / "model")
    assert loaded.config_.module_class is SparseMLP and loaded.config_.step_engine == "fused"
    np.testing.assert_array_equal(loaded.predict(X[:40]), pred)
    np.testing.assert_array_equal(loaded.predict_proba(X[:40]), proba)
    loaded.partial_fit(X, y)  # continues on the fused step
    assert loaded.net_.step_engine_ == "fused" and loaded.net_.step_fallbacks_ == 0
    dense = torch.from_numpy(X[:7])
    paths, _ = export_program(clf, dense[:3]).module()(dense)
    lookup = np.append(clf.classes_.astype(object), clf.pad_label_)
    np.testing.assert_array_equal(lookup[paths.numpy()].astype(pred.dtype), clf.predict(X[:7]))
