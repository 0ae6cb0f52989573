"""The fused step's sampled softmax of wide sibling groups (``softmax_sample``).

A used group wider than the limit is scored, for the whole batch, on one candidate set: the
batch's own targets in it and uniformly drawn others, with the sampled-softmax correction
``log(1 / Q)`` on the drawn ones. Checked here: a sample that covers every group is the exact
step, bit for bit; the step equals a plain torch implementation of the sampled loss given the
same candidates; the candidates are what they should be and follow torch's seed; the
classifier resolves, reports and saves the setting.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from support import sparse_rows

from hiclass_parallel.estimators import SparseMLP
from hiclass_parallel.estimators.networks import _native_path_step
from hiclass_parallel.estimators.networks.engines._fused import _workspace, fused_step
from hiclass_parallel.losses import PathLocalCrossEntropy
from hiclass_parallel.ops.groups import n_outputs
from hiclass_parallel.ops.sibling_paths import sibling_plan
from hiclass_parallel import Tree

pytestmark = pytest.mark.skipif(not _native_path_step.available(),
                                reason="the fused step's C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")


def _wide_tree(random_tree, rng: np.random.Generator, n: int, n_top: int) -> Tree:
    """A random tree with shuffled ids and two wide groups: ``n_top`` top-level classes, and
    about a third of the rest moved under one of them."""
    parents = np.full(n, -1, dtype=np.int64)
    for i in range(n_top, n):  # each node's parent drawn among earlier nodes; the first n_top are roots
        parents[i] = rng.integers(0, i)
    hub = n_top  # a wide group inside the tree: under the first root
    parents[hub] = 0
    moved = rng.random(n) < 0.35
    moved[:hub + 1] = False
    parents[moved] = hub
    return Tree.from_parents(random_tree.shuffle(parents, rng))


def _case(random_tree, seed: int, stop: bool, semantics: str, level: float, B: int, n: int = 600, H: int = 8,
          activation: type | None = None):
    from hiclass_parallel.estimators.networks._data import csr_tensor

    rng = np.random.default_rng(seed)
    tree = _wide_tree(random_tree, rng, n, n_top=40)
    torch.manual_seed(seed)
    module = SparseMLP(30, n_outputs(tree, "sibling", stop), hidden_units=H, activation=activation)
    with torch.no_grad():
        module.head.bias.weight.normal_()
        module.head.weight.weight.normal_(std=0.5)
        if activation is not None:
            module.input.bias.normal_(std=0.3)  # some hidden units off for some rows, on for others
    criterion = PathLocalCrossEntropy(tree, stop=stop, semantics=semantics, level_contrast=level)
    module.train()
    criterion.train()
    X = csr_tensor(sparse_rows(B, 30, density=0.2, seed=seed))
    y = torch.as_tensor(rng.integers(-1, n, B))
    weight = torch.as_tensor(rng.uniform(0.0, 2.0, B), dtype=torch.float32)
    weight[rng.random(B) < 0.1] = 0.0  # zero weights: unlabelled, not positives
    return module, criterion, X, y, weight


def _grads(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: (p.grad.to_dense() if p.grad.is_sparse else p.grad).clone() for k, p in module.named_parameters()}


def _step(module, criterion, X, y, weight, sample) -> tuple[float, dict[str, torch.Tensor]]:
    module.zero_grad(set_to_none=True)
    out = fused_step(module, criterion, X, y, sample_weight=weight, softmax_sample=sample)
    return float(out["loss"]), _grads(module)


CASES = [(True, "terminal", 0.3, 160), (True, "partial", 0.0, 23), (False, "partial", 0.3, 160),
         (True, "terminal", 0.0, 23)]


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("stop", "semantics", "level", "B"), CASES)
def test_a_sample_that_covers_every_group_is_the_exact_step(random_tree, seed, stop, semantics, level, B):
    """Every group of two or more columns goes through the sampler, whose sample then holds
    every column: the loss and every gradient are those of the exact step, bit for bit (the
    exact step itself is tested equal to the torch route in test_fused_step.py)."""
    module, criterion, X, y, weight = _case(random_tree, seed, stop, semantics, level, B)
    for w in (None, weight):
        exact_loss, exact = _step(module, criterion, X, y, w, 0)
        assert _workspace(module, criterion).last_sample is None
        loss, grads = _step(module, criterion, X, y, w, (1, 10**6))
        sampled = _workspace(module, criterion).last_sample
        assert sampled and all(bool((off == 0).all()) for _, off in sampled.values())
        assert loss == exact_loss
        for name, grad in grads.items():
            assert torch.equal(grad, exact[name]), name


def _reference_loss(module, criterion, X, y, weight, sampled) -> torch.Tensor:
    """The sampled loss in plain torch: each path row a softmax over its group's columns, or
    over the group's sampled candidates with their corrections added, weighted mean over the
    rows; plus the criterion's own in-batch level term."""
    tree, stop = criterion.tree, criterion.stop
    plan = sibling_plan(tree, stop)
    C = tree.n_classes
    hidden = module.encode(X)
    W, b = module.head.weight.weight, module.head.bias.weight.reshape(-1)
    losses, weights = [], []
    for i, t in enumerate(y.tolist()):
        w = 1.0 if weight is None else float(weight[i])
        if t < 0 or w == 0.0:
            continue
        rows = [(int(plan.group_of[node]), int(node)) for node in plan.paths[t] if node >= 0]
        if criterion.semantics == "terminal" and stop and plan.child_group[t] >= 0:
            g = int(plan.child_group[t])
            rows.append((g, C + g - 1))
        for g, target in rows:
            if g in sampled:
                cols, off = sampled[g]
            else:
                cols = torch.as_tensor(plan.group_cols[plan.group_ptr[g]:plan.group_ptr[g + 1]].copy())
                off = torch.zeros(len(cols))
            logits = hidden[i] @ W[cols].t() + b[cols] + off
            losses.append(torch.logsumexp(logits, 0) - logits[int((cols == target).nonzero()[0, 0])])
            weights.append(w)
    weights_t = torch.as_tensor(weights)
    path = (torch.stack(losses) * weights_t).sum() / weights_t.sum()
    kw = {} if weight is None else {"sample_weight": weight}
    with_level = criterion(module.scorer(hidden), y, **kw)
    level = criterion.level_contrast
    criterion.level_contrast = 0.0
    try:
        without_level = criterion(module.scorer(hidden), y, **kw)
    finally:
        criterion.level_contrast = level
    return path + (with_level - without_level)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("stop", "semantics", "level", "B"), CASES)
@pytest.mark.parametrize("activation", [None, torch.nn.ReLU])
def test_the_sampled_step_equals_the_sampled_loss_in_torch(random_tree, seed, stop, semantics, level, B, activation):
    """Groups wider than 20 columns train on 150 candidates: the fused step's loss and gradients
    equal autograd's on the same sampled loss written in torch, given the step's candidates
    (a linear hidden layer, and a ReLU one)."""
    module, criterion, X, y, weight = _case(random_tree, seed, stop, semantics, level, B, activation=activation)
    plan = sibling_plan(criterion.tree, stop)
    for w in (None, weight):
        loss, grads = _step(module, criterion, X, y, w, (20, 150))
        sampled = _workspace(module, criterion).last_sample
        assert sampled, "no group was sampled"
        assert any(bool((off > 0).any()) for _, off in sampled.values())
        module.zero_grad(set_to_none=True)
        reference = _reference_loss(module, criterion, X, y, w, sampled)
        reference.backward()
        assert loss == pytest.approx(reference.item(), rel=1e-5, abs=1e-6)
        for name, grad in _grads(module).items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
        for g, (cols, off) in sampled.items():
            members = plan.group_cols[plan.group_ptr[g]:plan.group_ptr[g + 1]]
            assert len(members) > 20 and len(cols) == min(len(members), max(150, int((off == 0).sum())))
            position = {int(c): i for i, c in enumerate(members)}
            assert [position[int(c)] for c in cols] == sorted(position[int(c)] for c in cols)  # group order
            k = int((off == 0).sum())
            drawn = off[off != 0]
            if len(drawn):
                assert torch.allclose(drawn, torch.full_like(drawn, math.log((len(members) - k) / (len(cols) - k))))


def _positives(criterion, y, weight, g: int) -> set[int]:
    plan = sibling_plan(criterion.tree, criterion.stop)
    C, out = criterion.tree.n_classes, set()
    for i, t in enumerate(y.tolist()):
        if t < 0 or (weight is not None and float(weight[i]) == 0.0):
            continue
        out |= {int(node) for node in plan.paths[t] if node >= 0 and plan.group_of[node] == g}
        if criterion.semantics == "terminal" and criterion.stop and plan.child_group[t] == g:
            out.add(C + g - 1)
    return out


def test_the_candidates_are_the_batchs_targets_and_draws_that_follow_torchs_seed(random_tree):
    module, criterion, X, y, weight = _case(random_tree, 0, True, "terminal", 0.3, 160)
    torch.manual_seed(5)
    _step(module, criterion, X, y, weight, (20, 150))
    first = _workspace(module, criterion).last_sample
    assert any(bool((off != 0).any()) for _, off in first.values())
    for g, (cols, off) in first.items():
        positives = _positives(criterion, y, weight, g)
        if bool((off != 0).any()):  # drawn columns corrected, the targets not
            assert {int(c) for c in cols[off == 0]} == positives
        else:  # every column drawn: the exact softmax
            assert positives <= {int(c) for c in cols}
    torch.manual_seed(5)
    _step(module, criterion, X, y, weight, (20, 150))
    again = _workspace(module, criterion).last_sample
    assert first.keys() == again.keys() and all(torch.equal(first[g][0], again[g][0]) for g in first)
    _step(module, criterion, X, y, weight, (20, 150))
    other = _workspace(module, criterion).last_sample
    assert any(not torch.equal(first[g][0], other[g][0]) for g in first)


def _fit_data(n: int = 300, rows: int = 400):
    rng = np.random.default_rng(0)
    parents = np.full(n, -1)
    parents[50:] = rng.integers(0, 50, n - 50)  # 50 roots: the top group is the widest
    X = sparse_rows(rows, 40, density=0.2, seed=0)
    return Tree.from_parents(parents), X, rng.integers(0, n, rows)


@pytest.mark.parametrize(("setting", "limit", "says"), [
    ("auto", 0, "no sibling group is wider than 1,024 columns"),
    (20, 20, "1 sibling group wider than 20 columns"),
    (None, 0, "softmax_sample=None"),
])
def test_the_classifier_resolves_reports_saves_and_loads_the_setting(tmp_path, setting, limit, says):
    pytest.importorskip("safetensors", reason="saving without pickle needs safetensors (the 'persist' extra)")
    from hiclass_parallel.estimators import HierarchicalClassifier, load_classifier, save_classifier

    tree, X, y = _fit_data()
    clf = HierarchicalClassifier(tree, softmax_sample=setting, max_epochs=2, random_state=0).fit(X, y)
    assert clf.config_.step_engine == "fused"
    assert clf.config_.softmax_sample == limit and says in clf.config_.softmax_sample_reason
    assert clf.net_.softmax_sample == limit
    loaded = load_classifier(save_classifier(clf, tmp_path / "model"))
    assert loaded.get_params()["softmax_sample"] == setting
    assert loaded.config_.softmax_sample == limit
    assert loaded.config_.softmax_sample_reason == clf.config_.softmax_sample_reason
    np.testing.assert_array_equal(loaded.predict(X[:20]), clf.predict(X[:20]))


def test_the_torch_route_stays_exact_and_bad_settings_are_named():
    from hiclass_parallel.estimators import MLP, HierarchicalClassifier

    tree, X, y = _fit_data()
    dense = HierarchicalClassifier(tree, module=MLP, softmax_sample=20, max_epochs=1, random_state=0).fit(X.toarray(), y)
    assert dense.config_.step_engine == "torch"
    assert dense.config_.softmax_sample == 0 and "torch step is exact" in dense.config_.softmax_sample_reason
    for bad in (0, -3, "some", 2.5):
        with pytest.raises(ValueError, match="softmax_sample"):
            HierarchicalClassifier(tree, softmax_sample=bad, max_epochs=1).fit(X, y)


def test_a_sampled_fit_is_reproducible_and_learns(random_tree):
    """The top group of 50 trains on 20 candidates: the fit repeats with the same random_state,
    and still learns the training rows about as well as the exact fit."""
    from hiclass_parallel.estimators import HierarchicalClassifier

    tree, X, y = _fit_data()
    fits = [HierarchicalClassifier(tree, softmax_sample=s, max_epochs=8, random_state=0).fit(X, y)
            for s in (20, 20, None)]
    torch.testing.assert_close(fits[0].net_.module_.head.weight.weight, fits[1].net_.module_.head.weight.weight,
                               rtol=0, atol=0)
    sampled, exact = (f.score(X, y) for f in (fits[0], fits[2]))
    assert sampled >= exact - 0.1


def test_continuing_a_fit_names_a_changed_setting_as_ignored():
    from hiclass_parallel.estimators import HierarchicalClassifier

    tree, X, y = _fit_data()
    clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(X, y)
    clf.set_params(softmax_sample=20)
    with pytest.warns(UserWarning, match="^softmax_sample changed since the network was built"):
        clf.partial_fit(X, y)
    assert clf.config_.softmax_sample == 0 and clf.net_.softmax_sample == 0


def test_the_demos_estimate_counts_the_wide_groups_on_each_path():
    """A flat tree of 1,500 classes: each row's path crosses one group of 1,500 columns, which
    the default sample cuts to SOFTMAX_SAMPLE; the estimate grows by the columns it pays."""
    from hiclass_parallel.demo import WIDE_COLUMN_SECONDS, estimate_training_seconds, wide_columns
    from hiclass_parallel.estimators.fitting._config import SOFTMAX_SAMPLE

    tree = Tree.from_parents(np.full(1500, -1))
    labels = tree.labels[:40]
    assert wide_columns(tree, labels) == SOFTMAX_SAMPLE
    assert wide_columns(tree, labels, softmax_sample=10**6) == 1500
    assert wide_columns(Tree.from_parents(np.full(300, -1)), labels[:3]) == 0.0  # narrow: the recorded cost
    low, high = estimate_training_seconds(1000, 2, 1500)
    wide_low, wide_high = estimate_training_seconds(1000, 2, 1500, wide=1500.0)
    assert wide_low - low == pytest.approx(WIDE_COLUMN_SECONDS * 1000 * 2 * 1500)
    assert wide_high - high == pytest.approx(wide_low - low)
