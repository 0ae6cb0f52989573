"""The fused path-local training step (C) against the torch route it replaces.

The torch route (``SparseMLP.encode`` / ``scorer``, ``PathLocalCrossEntropy``, autograd) is the
reference: the fused step must give the same loss and the same gradients, on random trees with
shuffled ids, with and without stops, both semantics, with and without the in-batch level term
and unlabelled rows. (``LazyAdam``'s C row update: ``tests/estimators/networks/test_optim.py``.)
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from support import sparse_rows

from hiclass_parallel.estimators import HierarchicalClassifier, SparseMLP
from hiclass_parallel.estimators.networks._data import csr_tensor
from hiclass_parallel.estimators.networks.engines._fused import FusedEngine, fused_step
from hiclass_parallel.losses import PathLocalCrossEntropy
from hiclass_parallel.estimators.networks import _native_path_step
from hiclass_parallel.ops.groups import n_outputs

pytestmark = pytest.mark.skipif(not _native_path_step.available(),
                                reason="the fused step's C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")


def _case(random_tree, seed: int, stop: bool, semantics: str, level: float, B: int = 23, n: int = 60, H: int = 8,
          text: bool = False, activation: type | None = None):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n)
    torch.manual_seed(seed)
    # class text: a few features per class (some absent from any batch row), stop columns without
    class_features = sparse_rows(n, 30, density=0.08, seed=seed) if text else None
    module = SparseMLP(30, n_outputs(tree, "sibling", stop), hidden_units=H, class_features=class_features,
                       activation=activation)
    with torch.no_grad():
        module.head.bias.weight.normal_()  # zero at the start: give the bias gradient something to check
        if text:
            module.match_weight.normal_(std=0.003)  # zero at the start: give the match a value
    criterion = PathLocalCrossEntropy(tree, stop=stop, semantics=semantics, level_contrast=level)
    module.train()
    criterion.train()
    X = csr_tensor(sparse_rows(B, 30, density=0.2, seed=seed))
    y = torch.as_tensor(rng.integers(-1, n, B))  # -1: unlabelled rows
    return module, criterion, X, y


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).clone() for k, p in module.named_parameters()}


def _assert_fused_equals_torch(module, criterion, X, y, weight=None) -> dict[str, torch.Tensor]:
    """The torch route's loss and gradients, then the fused step's: equal within float
    tolerance (with ``weight``, both weighted). Returns the torch route's gradients (the fused
    step's stay in ``p.grad``)."""
    weighted = {} if weight is None else {"sample_weight": weight}
    loss = criterion(module.scorer(module.encode(X)), y, **weighted)
    loss.backward()
    reference = _grads(module)
    module.zero_grad(set_to_none=True)
    out = fused_step(module, criterion, X, y, **weighted)
    assert float(out["loss"]) == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    for name, grad in _grads(module).items():
        torch.testing.assert_close(grad, reference[name], rtol=1e-4, atol=1e-6, msg=name)
    return reference


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("stop", "semantics"), [(False, "partial"), (True, "partial"), (True, "terminal")])
@pytest.mark.parametrize("level", [0.0, 0.3])
def test_fused_step_equals_the_torch_route(random_tree, seed, stop, semantics, level):
    module, criterion, X, y = _case(random_tree, seed, stop, semantics, level)
    assert FusedEngine.batch_refusal(module, criterion, X) is None
    _assert_fused_equals_torch(module, criterion, X, y)
    # the sparse gradients come out coalesced: distinct rows, ascending
    for p in (module.input.embedding.weight, module.head.weight.weight):
        rows = p.grad.indices()[0]
        assert p.grad.is_coalesced() and bool((rows[1:] > rows[:-1]).all())


def _dense_and_listed_rows(plan, y: np.ndarray, stop_rows: bool) -> tuple[int, int]:
    """How many of a batch's path rows the kernel reads from the dense block (their group used
    by at least a quarter of the batch, and 8 samples) and how many it lists as pairs."""
    groups = []
    for t in y[y >= 0]:
        path = plan.paths[t][plan.paths[t] >= 0]
        groups += [int(plan.group_of[node]) for node in path]
        if stop_rows and plan.child_group[t] >= 0:
            groups.append(int(plan.child_group[t]))
    uses = np.bincount(groups)
    dense = uses[groups] >= max(len(y) // 4, 8)
    return int(dense.sum()), int((~dense).sum())


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("level", [0.0, 0.3])
def test_dense_rows_and_listed_pairs_together_equal_the_torch_route(random_tree, seed, level):
    """A bigger batch on a bigger tree: the upper groups' (and depths') softmax rows are read from
    the dense block and the rest listed as pairs, in one step; a sample's path row and level row
    may share a column of the block."""
    from hiclass_parallel.ops.sibling_paths import sibling_plan

    module, criterion, X, y = _case(random_tree, seed, True, "terminal", level, B=160, n=400, H=16)
    dense, listed = _dense_and_listed_rows(sibling_plan(criterion.tree, True), y.numpy(), True)
    assert dense > 0 and listed > 0
    _assert_fused_equals_torch(module, criterion, X, y)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("stop", "semantics", "level", "B"),
                         [(True, "terminal", 0.3, 160), (False, "partial", 0.0, 23), (True, "partial", 0.3, 23)])
def test_class_text_on_the_fused_step_equals_the_torch_route(random_tree, seed, stop, semantics, level, B):
    """The class-text match (module__class_features) in the fused step: the same loss and the
    same gradients, the match weights' included, as the torch route (dense rows and listed
    pairs in the bigger batch)."""
    module, criterion, X, y = _case(random_tree, seed, stop, semantics, level, B=B, n=400 if B > 100 else 60,
                                    H=16, text=True)
    assert FusedEngine.batch_refusal(module, criterion, X) is None
    reference = _assert_fused_equals_torch(module, criterion, X, y)
    assert float(reference["match_weight"].abs().max()) > 0  # the match is trained, not only scored


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("stop", "semantics", "level", "B"),
                         [(False, "partial", 0.0, 23), (True, "terminal", 0.3, 160), (True, "partial", 0.3, 23),
                          (False, "partial", 0.3, 160)])
def test_sample_weights_on_the_fused_step_equal_the_torch_route_and_repeated_rows(random_tree, seed, stop, semantics,
                                                                                   level, B):
    """Weighted rows (0 to 3, fractions too): the fused step's loss and gradients equal the
    torch route's with the same weights (dense rows and listed pairs in the bigger batch), and
    integer weights equal the unweighted step on every row repeated that many times (a zero
    weight: the row dropped, also from the in-batch level term's candidates)."""
    from hiclass_parallel.estimators._checks import sparse_tensor_to_csr

    module, criterion, X, y = _case(random_tree, seed, stop, semantics, level, B=B, n=400 if B > 100 else 60, H=16)
    rng = np.random.default_rng(seed)
    fractions = torch.as_tensor(rng.uniform(0.0, 2.0, B), dtype=torch.float32)
    _assert_fused_equals_torch(module, criterion, X, y, fractions)
    module.zero_grad(set_to_none=True)
    counts = rng.integers(0, 4, B)
    _assert_fused_equals_torch(module, criterion, X, y, torch.as_tensor(counts, dtype=torch.float32))
    weighted = _grads(module)
    weighted_loss = fused_step(module, criterion, X, y, sample_weight=torch.as_tensor(counts, dtype=torch.float32))
    module.zero_grad(set_to_none=True)
    repeat = np.repeat(np.arange(B), counts)
    repeated = fused_step(module, criterion, csr_tensor(sparse_tensor_to_csr(X)[repeat]), y[torch.as_tensor(repeat)])
    assert float(repeated["loss"]) == pytest.approx(float(weighted_loss["loss"]), rel=1e-5, abs=1e-6)
    for name, grad in _grads(module).items():
        torch.testing.assert_close(grad, weighted[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("stop", "semantics", "level", "B"),
                         [(False, "partial", 0.0, 23), (True, "partial", 0.3, 23), (True, "terminal", 0.3, 160),
                          (False, "partial", 0.3, 160)])
@pytest.mark.parametrize("weighted", [False, True])
def test_a_relu_hidden_layer_on_the_fused_step_equals_the_torch_route(random_tree, seed, stop, semantics, level, B,
                                                                      weighted):
    """``SparseMLP(activation=nn.ReLU)``: the kernel's max(h, 0) before the scores and the hidden
    gradient masked by h > 0 give torch's loss, gradients and hidden rows (listed pairs, and
    the dense block in the bigger batch; with and without sample weights)."""
    module, criterion, X, y = _case(random_tree, seed, stop, semantics, level, B=B, n=400 if B > 100 else 60, H=16,
                                    activation=torch.nn.ReLU)
    with torch.no_grad():
        module.input.bias.normal_(std=0.3)  # some hidden units off for some rows, on for others
    assert FusedEngine.batch_refusal(module, criterion, X) is None
    hidden = module.encode(X).detach()
    assert 0.1 < float((hidden > 0).float().mean()) < 0.9  # the mask does something
    weight = torch.as_tensor(np.random.default_rng(seed).uniform(0.0, 2.0, B), dtype=torch.float32) if weighted \
        else None
    reference = _assert_fused_equals_torch(module, criterion, X, y, weight)
    assert float(reference["input.bias"].abs().max()) > 0
    module.zero_grad(set_to_none=True)
    out = fused_step(module, criterion, X, y, **({} if weight is None else {"sample_weight": weight}))
    torch.testing.assert_close(out["y_pred"], hidden, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("stop", "semantics"), [(False, "partial"), (True, "terminal")])
def test_the_fused_update_of_a_relu_model_equals_the_torch_route_then_the_optimizer(random_tree, seed, stop,
                                                                                    semantics):
    """Three weighted steps with ReLU: the fused step's in-kernel LazyAdam update gives the
    weights and optimizer state of the torch route (autograd) followed by ``LazyAdam.step``."""
    import copy

    module, criterion, X, y = _case(random_tree, seed, stop, semantics, 0.3, B=160, n=400, H=16,
                                    activation=torch.nn.ReLU)
    with torch.no_grad():
        module.input.bias.normal_(std=0.3)
    other = copy.deepcopy(module)
    fused_opt, torch_opt = _optimizer(module, 0.0, "row"), _optimizer(other, 0.0, "row")
    rng = np.random.default_rng(seed)
    for step in range(3):
        X = csr_tensor(sparse_rows(160, 30, density=0.2, seed=seed * 10 + step))
        y = torch.as_tensor(rng.integers(-1, 400, 160))
        weight = torch.as_tensor(rng.uniform(0.0, 2.0, 160), dtype=torch.float32)
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
        torch.testing.assert_close(p, q, rtol=1e-5, atol=2e-5, msg=name)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(fused_opt.state[p][key].float(), torch_opt.state[q][key].float(),
                                       rtol=1e-5, atol=1e-7, msg=f"{name} {key}")


def test_only_relu_joins_the_linear_model_on_the_fused_step(random_tree):
    """The fused step takes ``activation`` None, ``nn.Identity`` and ``nn.ReLU``, nothing else
    (not even a subclass of ``nn.ReLU``); the device step's kernels stay linear only."""
    from hiclass_parallel.estimators.networks.engines._kernel_model import built_model_refusal, model_refusal

    module, criterion, X, _y = _case(random_tree, 2, True, "terminal", 0.3)

    class LeakyReLU(torch.nn.ReLU):
        pass

    for activation in (None, torch.nn.Identity, torch.nn.ReLU):
        mlp = SparseMLP(30, module.n_outputs, activation=activation)
        assert FusedEngine.batch_refusal(mlp, criterion, X) is None
        args = {"activation": activation}
        assert model_refusal(SparseMLP, args, PathLocalCrossEntropy, {}, relu=True) is None
    for activation in (torch.nn.Tanh, torch.nn.GELU, LeakyReLU):
        mlp = SparseMLP(30, module.n_outputs, activation=activation)
        assert "activation" in FusedEngine.batch_refusal(mlp, criterion, X)
        assert "activation" in model_refusal(SparseMLP, {"activation": activation}, PathLocalCrossEntropy, {},
                                             relu=True)
    relu = SparseMLP(30, module.n_outputs, activation=torch.nn.ReLU)
    assert "activation" in built_model_refusal(relu, criterion)  # the device step's check
    assert "activation" in model_refusal(SparseMLP, {"activation": torch.nn.ReLU}, PathLocalCrossEntropy, {})
    assert "dropout" in FusedEngine.batch_refusal(
        SparseMLP(30, module.n_outputs, activation=torch.nn.ReLU, dropout=0.5), criterion, X)


def test_a_batch_without_labels_has_zero_loss_and_gradients(random_tree):
    module, criterion, X, _ = _case(random_tree, 0, True, "terminal", 0.3)
    out = fused_step(module, criterion, X, torch.full((X.shape[0],), -1))
    assert float(out["loss"]) == 0.0
    assert all(float(g.abs().max()) == 0.0 for g in _grads(module).values() if g.numel())


def test_out_of_range_targets_are_a_named_error(random_tree):
    module, criterion, X, y = _case(random_tree, 1, False, "partial", 0.0)
    y[3] = 10_000
    with pytest.raises(IndexError, match="10000"):
        fused_step(module, criterion, X, y)


def test_the_fused_step_refuses_what_it_was_not_written_for(random_tree):
    module, criterion, X, _y = _case(random_tree, 2, True, "terminal", 0.3)
    assert "dropout" in FusedEngine.batch_refusal(SparseMLP(30, module.n_outputs, dropout=0.5), criterion, X)
    dense = X.to_dense().double()  # a dense float32 batch is taken (tests/estimators/networks/test_fused_dense.py)
    assert "sparse CSR" in FusedEngine.batch_refusal(module, criterion, dense)
    summed = PathLocalCrossEntropy(criterion.tree, stop=True, reduction="sum")
    assert "reduction 'sum'" in FusedEngine.batch_refusal(module, summed, X)


def test_the_classifier_trains_fused_and_reports_it():
    from hiclass_parallel import Tree

    rng = np.random.default_rng(0)
    tree = Tree.from_parents(np.r_[-1, -1, rng.integers(0, 2, 10), rng.integers(2, 12, 30)])
    X = sparse_rows(300, 40, density=0.1, seed=0)
    y = rng.integers(0, tree.n_classes, 300)
    runs = {}
    for native in ("1", "0"):
        with warnings.catch_warnings(), pytest.MonkeyPatch.context() as mp:
            warnings.simplefilter("ignore")
            if native == "0":
                mp.setattr("hiclass_parallel.estimators.networks.engines._fused.native.available", lambda: False)
            clf = HierarchicalClassifier(tree, max_epochs=3, random_state=0, batch_size=64).fit(X, y)
        runs[native] = clf
    assert runs["1"].net_.step_engine_ == "fused"
    assert runs["0"].net_.step_engine_ == "torch"
    # the same training, step for step, within float tolerance
    losses = [np.array(c.net_.history[:, "train_loss"]) for c in runs.values()]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)
    np.testing.assert_array_equal(runs["1"].predict(X[:50]), runs["0"].predict(X[:50]))


# ---------------------------------------------------------------------------- the fused update
def _optimizer(module: SparseMLP, weight_decay: float, second_moment: str, first_moment: str = "float32"):
    from hiclass_parallel.estimators import LazyAdam

    groups = [{"params": [module.input.embedding.weight], "second_moment": second_moment, "lr_scale": 3.0,
               "first_moment": first_moment},
              {"params": [module.head.weight.weight], "first_moment": first_moment},
              {"params": [p for n, p in module.named_parameters() if n not in ("input.embedding.weight",
                                                                             "head.weight.weight")]}]
    return LazyAdam(groups, lr=0.01, weight_decay=weight_decay)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("second_moment", "weight_decay", "first_moment"),
                         [("row", 0.0, "float32"), ("entry", 0.0, "float32"), ("row", 1e-3, "float32"),
                          ("row", 0.0, "bfloat16"), ("entry", 1e-3, "bfloat16")])
def test_the_fused_update_equals_the_step_then_the_optimizer(random_tree, seed, second_moment, weight_decay,
                                                              first_moment):
    """Three steps on different batches: the weights and the optimizer's state after the fused
    update (rows updated inside the step) equal those of the unfused step followed by
    ``LazyAdam.step``."""
    import copy

    module, criterion, X, y = _case(random_tree, seed, True, "terminal", 0.3, B=160, n=400, H=16)
    other, start = copy.deepcopy(module), copy.deepcopy(module)
    fused_opt = _optimizer(module, weight_decay, second_moment, first_moment)
    plain_opt = _optimizer(other, weight_decay, second_moment, first_moment)
    rng = np.random.default_rng(seed)
    for step in range(3):
        X = csr_tensor(sparse_rows(160, 30, density=0.2, seed=seed * 10 + step))
        y = torch.as_tensor(rng.integers(-1, 400, 160))
        for opt, mod, fuse in ((fused_opt, module, True), (plain_opt, other, False)):
            opt.zero_grad(set_to_none=True)
            opt.step(lambda mod=mod, opt=opt, fuse=fuse: fused_step(mod, criterion, X, y, opt if fuse else None)["loss"])
        assert module.input.embedding.weight.grad is None and module.head.weight.weight.grad is None
    for (name, p), q in zip(module.named_parameters(), other.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
        for key in ("exp_avg", "exp_avg_sq", "step"):
            # (bfloat16 moments: the same rounding of floats equal to the ulp, or one bfloat16 ulp apart)
            exact = fused_opt.state[p][key].dtype != torch.bfloat16
            torch.testing.assert_close(fused_opt.state[p][key].float(), plain_opt.state[q][key].float(),
                                       rtol=1e-5 if exact else 2**-7, atol=1e-7, msg=f"{name} {key}")
    # the update reached the rows (equal weights could also mean neither moved)
    moved = (module.head.weight.weight != start.head.weight.weight).any(1)
    assert 0 < int(moved.sum()) < moved.numel()  # touched rows only
    assert bool((module.input.embedding.weight != start.input.embedding.weight).any())


def test_the_fused_update_steps_aside_when_gradients_are_already_set(random_tree):
    module, criterion, X, y = _case(random_tree, 0, True, "terminal", 0.3)
    opt = _optimizer(module, 0.0, "row")
    W_in, W_out = module.input.embedding.weight, module.head.weight.weight
    seen = []
    fused_step(module, criterion, X, y)  # gradients set, not applied
    opt.step(lambda: seen.append(opt.fused_row_updates(W_in, W_out)))
    assert seen == [None]  # the gradients were set: the optimizer's own step applied them
    assert int(opt.state[W_in]["step"]) == 1
    opt.zero_grad(set_to_none=True)
    opt.step(lambda: seen.append(opt.fused_row_updates(W_in, W_out)))
    assert len(seen[-1]) == 2 and int(opt.state[W_in]["step"]) == 2 and int(opt.state[W_out]["step"]) == 2


def test_outside_the_optimizers_step_the_fused_step_leaves_gradients(random_tree):
    """A loop that accumulates gradients over batches and steps later (skorch's recipe calls
    train_step_single itself) must get gradients, not updates, even with the optimizer given."""
    import copy

    module, criterion, X, y = _case(random_tree, 1, True, "terminal", 0.3, B=160, n=400, H=16)
    other = copy.deepcopy(module)
    opt = _optimizer(module, 0.0, "row")
    before = module.head.weight.weight.detach().clone()
    fused_step(module, criterion, X, y, opt)  # not inside opt.step: no update
    fused_step(module, criterion, X, y, opt)  # accumulates
    assert torch.equal(module.head.weight.weight, before) and not opt.state
    assert module.head.weight.weight.grad is not None
    fused_step(other, criterion, X, y)
    torch.testing.assert_close(module.head.weight.weight.grad.to_dense(),
                               2 * other.head.weight.weight.grad.to_dense(), rtol=1e-5, atol=1e-7)


def test_what_reads_gradients_keeps_the_update_in_the_optimizer():
    from skorch.callbacks import Callback

    from hiclass_parallel import Tree
    from hiclass_parallel.estimators.networks.engines._kernel_model import net_update_refusal

    class Spy(Callback):
        seen = 0

        def on_grad_computed(self, net, named_parameters, **kwargs):
            Spy.seen += sum(p.grad is not None for _, p in named_parameters)

    rng = np.random.default_rng(1)
    tree = Tree.from_parents(np.r_[-1, -1, rng.integers(0, 2, 10), rng.integers(2, 12, 30)])
    X = sparse_rows(300, 40, density=0.1, seed=1)
    y = rng.integers(0, tree.n_classes, 300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = HierarchicalClassifier(tree, max_epochs=2, random_state=0, batch_size=64).fit(X, y)
        spied = HierarchicalClassifier(tree, max_epochs=2, random_state=0, batch_size=64, callbacks=[Spy()]).fit(X, y)
        other_opt = HierarchicalClassifier(tree, max_epochs=2, random_state=0, batch_size=64,
                                           optimizer=torch.optim.SGD).fit(X, y)
    assert plain.net_.update_engine_ == "fused" and net_update_refusal(plain.net_) is None
    assert spied.net_.update_engine_ == "optimizer" and other_opt.net_.update_engine_ == "optimizer"
    assert "'Spy'" in net_update_refusal(spied.net_) and "SGD" in net_update_refusal(other_opt.net_)
    assert Spy.seen > 0  # the callback saw the big layers' gradients
    # the same training either way
    np.testing.assert_allclose(spied.net_.history[:, "train_loss"], plain.net_.history[:, "train_loss"], rtol=1e-4)
    np.testing.assert_array_equal(spied.predict(X[:50]), plain.predict(X[:50]))


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_batches_gathered_from_the_csr_arrays_equal_scipy_row_indexing(fmt):
    from hiclass_parallel.estimators.networks._data import csr_rows

    X = sparse_rows(50, 30, density=0.1, seed=3, dtype=np.float64, format="lil")
    X[7] = 0  # an empty row
    X = X.asformat(fmt)
    idx = np.array([7, 3, 3, 49, 0, 12], dtype=np.int64)  # repeats, any order
    got, want = csr_rows(X, idx), csr_tensor(X[idx])
    assert got.dtype == torch.float32 and got.shape == (6, 30)
    for part in ("crow_indices", "col_indices", "values"):
        torch.testing.assert_close(getattr(got, part)(), getattr(want, part)(), msg=part)
    np.testing.assert_array_equal(got.to_dense().numpy(), X[idx].toarray().astype(np.float32))
