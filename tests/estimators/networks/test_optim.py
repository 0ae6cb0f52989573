"""``LazyAdam`` against the updates it must reproduce: its C row update against its torch row
update (per-entry and row-wise second moments), its row-wise update against the formula
written out, and its dense update against ``torch.optim.Adam``."""

from __future__ import annotations

import pytest
import torch
from support import sparse_rows

from hiclass_parallel.estimators import LazyAdam
from hiclass_parallel.estimators.networks import _native_path_step


def _sparse_steps(second_moment: str, steps: int = 5,
                  first_moment: str = "float32") -> tuple[torch.Tensor, torch.optim.Optimizer]:
    torch.manual_seed(0)
    emb = torch.nn.Embedding(50, 16, sparse=True)
    opt = LazyAdam(emb.parameters(), lr=0.05, weight_decay=0.01, second_moment=second_moment,
                   first_moment=first_moment)
    for step in range(steps):
        idx = torch.randint(0, 50, (12,), generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        (emb(idx) ** 2).sum().backward()
        opt.step()
    return emb.weight.detach().clone(), opt


@pytest.mark.skipif(not _native_path_step.available(), reason="the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")
@pytest.mark.parametrize("first_moment", ["float32", "bfloat16"])
@pytest.mark.parametrize("second_moment", ["entry", "row"])
def test_lazy_adam_row_update_equals_the_torch_route(monkeypatch, second_moment, first_moment):
    native, native_opt = _sparse_steps(second_moment, first_moment=first_moment)
    monkeypatch.setattr("hiclass_parallel.estimators.networks._optim._native_rows", lambda *a: False)
    torch_route, opt = _sparse_steps(second_moment, first_moment=first_moment)
    state = opt.state[opt.param_groups[0]["params"][0]]
    assert state["exp_avg_sq"].shape == ((50, 1) if second_moment == "row" else (50, 16))
    assert state["exp_avg"].dtype == getattr(torch, first_moment)
    # fast-math rounding (a reciprocal for the division) differs from torch by an ulp or so. A
    # bfloat16 moment is the same float rounded the same way, but a float an ulp apart may land
    # on the other side of a rounding boundary (one entry of 800 in five steps here): that
    # entry's moment is then one bfloat16 ulp (2^-8) apart, and its weight by about lr * 2^-8.
    torch.testing.assert_close(native, torch_route, rtol=1e-4, atol=1e-5 if first_moment == "float32" else 5e-4)
    native_m = native_opt.state[native_opt.param_groups[0]["params"][0]]["exp_avg"]
    torch.testing.assert_close(native_m.float(), state["exp_avg"].float(), rtol=2**-7, atol=1e-6)


@pytest.mark.parametrize("native", [True, False])
def test_a_bfloat16_first_moment_is_the_float32_update_rounded(monkeypatch, native):
    # Three steps written out: the update computes the moment in float32, moves the weights by
    # it, and stores it rounded to the nearest bfloat16 (torch's .to(torch.bfloat16)), from
    # which the next step starts.
    if native and not _native_path_step.available():
        pytest.skip("the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")
    if not native:
        monkeypatch.setattr("hiclass_parallel.estimators.networks._optim._native_rows", lambda *a: False)
    torch.manual_seed(0)
    emb = torch.nn.Embedding(6, 8, sparse=True)
    start = emb.weight.detach().clone()
    lr, (b1, b2), eps = 0.1, (0.9, 0.999), 1e-8
    opt = LazyAdam([{"params": emb.parameters(), "first_moment": "bfloat16"}], lr=lr, eps=eps)
    rows = torch.tensor([1, 4])
    p, m, v = start[rows].clone(), torch.zeros(2, 8, dtype=torch.bfloat16), torch.zeros(2, 8)
    for step in range(1, 4):
        g = torch.randn(2, 8, generator=torch.Generator().manual_seed(step)) / 3
        opt.zero_grad()
        (emb(rows) * g).sum().backward()
        opt.step()
        m32 = b1 * m.float() + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr / (1 - b1**step) * m32 / ((v / (1 - b2**step)).sqrt() + eps)
        m = m32.to(torch.bfloat16)
    state = opt.state[emb.weight]
    assert state["exp_avg"].dtype == torch.bfloat16 and state["exp_avg_sq"].dtype == torch.float32
    # (the C route's fast-math division differs from torch's by an ulp or so)
    torch.testing.assert_close(emb.weight.detach()[rows], p, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(state["exp_avg"][rows].float(), m.float(), rtol=2**-7, atol=1e-7)
    torch.testing.assert_close(emb.weight.detach()[[0, 2, 3, 5]], start[[0, 2, 3, 5]])  # untouched rows


def test_a_bfloat16_first_moment_keeps_dense_adam_within_its_rounding():
    # Dense gradients (the biases) in a bfloat16 group: Adam's update in float32 arithmetic, the
    # moment stored rounded; the weights stay within the moment's rounding of torch's Adam.
    weights = []
    for make in (lambda ps: LazyAdam(ps, lr=0.05, first_moment="bfloat16"), lambda ps: torch.optim.Adam(ps, lr=0.05)):
        torch.manual_seed(0)
        layer = torch.nn.Linear(6, 3)
        opt = make(layer.parameters())
        for step in range(5):
            opt.zero_grad()
            (layer(torch.randn(8, 6, generator=torch.Generator().manual_seed(step))) ** 2).sum().backward()
            opt.step()
        weights.append([p.detach().clone() for p in layer.parameters()])
    for ours, theirs in zip(*weights):
        torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-3)


def test_row_second_moment_is_the_mean_square_of_the_row():
    # Two steps on rows 1 and 3 written out: v_r = b2 v_r + (1 - b2) mean_j g_rj^2, one per
    # row, and each entry moves by lr_t m_rj / (sqrt(v_r / bc2) + eps).
    torch.manual_seed(0)
    emb = torch.nn.Embedding(5, 4, sparse=True)
    start = emb.weight.detach().clone()
    lr, (b1, b2), eps = 0.1, (0.9, 0.999), 1e-8
    opt = LazyAdam([{"params": emb.parameters(), "second_moment": "row"}], lr=lr, eps=eps)
    grads = [torch.tensor([[1.0, -2.0, 0.5, 0.0], [3.0, 0.0, 0.0, -1.0]]),
             torch.tensor([[0.0, 1.0, 1.0, 1.0], [-1.0, 2.0, 0.0, 0.0]])]
    p, m, v = start[[1, 3]].clone(), torch.zeros(2, 4), torch.zeros(2, 1)
    for step, g in enumerate(grads, 1):
        opt.zero_grad()
        (emb(torch.tensor([1, 3])) * g).sum().backward()
        opt.step()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * (g**2).mean(1, keepdim=True)
        p = p - lr / (1 - b1**step) * m / ((v / (1 - b2**step)).sqrt() + eps)
    torch.testing.assert_close(emb.weight.detach()[[1, 3]], p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(emb.weight.detach()[[0, 2, 4]], start[[0, 2, 4]])  # untouched rows
    torch.testing.assert_close(opt.state[emb.weight]["exp_avg_sq"][[1, 3]], v)


def test_a_loaded_state_keeps_its_second_moment():
    # A state saved with per-entry moments (torch's Adam's, or LazyAdam's "entry") goes on
    # per entry in a "row" group: the state's shape decides, never a silent reshape.
    _, opt = _sparse_steps("entry", steps=2)
    emb = torch.nn.Embedding(50, 16, sparse=True)
    row = LazyAdam([{"params": emb.parameters(), "second_moment": "row"}], lr=0.05)
    row.load_state_dict(opt.state_dict())
    emb(torch.tensor([0, 4])).sum().backward()
    row.step()
    assert row.state[emb.weight]["exp_avg_sq"].shape == (50, 16)


def test_a_loaded_state_keeps_its_first_moments_dtype():
    # torch casts a loaded state to its parameter's dtype; LazyAdam keeps a bfloat16 moment
    # bfloat16 (and a float32 one float32, in a bfloat16 group: the state decides)
    _, opt = _sparse_steps("row", steps=2, first_moment="bfloat16")
    emb = torch.nn.Embedding(50, 16, sparse=True)
    again = LazyAdam([{"params": emb.parameters(), "second_moment": "row"}], lr=0.05)
    again.load_state_dict(opt.state_dict())
    assert again.state[emb.weight]["exp_avg"].dtype == torch.bfloat16
    torch.testing.assert_close(again.state[emb.weight]["exp_avg"], opt.state[opt.param_groups[0]["params"][0]]["exp_avg"])
    emb(torch.tensor([0, 4])).sum().backward()
    again.step()
    assert again.state[emb.weight]["exp_avg"].dtype == torch.bfloat16
    _, full = _sparse_steps("row", steps=2)
    half = LazyAdam([{"params": emb.parameters(), "first_moment": "bfloat16"}], lr=0.05)
    half.load_state_dict(full.state_dict())
    assert half.state[emb.weight]["exp_avg"].dtype == torch.float32


def test_group_options_are_checked():
    emb = torch.nn.Embedding(3, 2, sparse=True)
    with pytest.raises(ValueError, match="second_moment must be 'entry' or 'row', got 'rows'"):
        LazyAdam(emb.parameters(), second_moment="rows")
    with pytest.raises(ValueError, match="second_moment must be 'entry' or 'row', got 'per-row'"):
        LazyAdam([{"params": emb.parameters(), "second_moment": "per-row"}])
    for bad in (0, -1.0, True, "3"):
        with pytest.raises(ValueError, match=f"lr_scale must be a positive number, got {bad!r}"):
            LazyAdam([{"params": emb.parameters(), "lr_scale": bad}])
    with pytest.raises(ValueError, match="first_moment must be 'float32' or 'bfloat16', got 'float16'"):
        LazyAdam(emb.parameters(), first_moment="float16")
    with pytest.raises(ValueError, match="first_moment must be 'float32' or 'bfloat16', got 'bf16'"):
        LazyAdam([{"params": emb.parameters(), "first_moment": "bf16"}])


@pytest.mark.parametrize("sparse", [True, False])
def test_lr_scale_is_a_group_learning_rate(sparse):
    # A group with lr_scale s steps exactly as a group with lr * s, sparse and dense; a change of
    # lr (a schedule, set_params) keeps the ratio.
    weights = []
    for groups in ([{"params": None, "lr_scale": 3.0}], [{"params": None, "lr": 0.06}]):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(20, 4, sparse=sparse)
        opt = LazyAdam([{**g, "params": emb.parameters()} for g in groups], lr=0.02)
        for step in range(3):
            opt.zero_grad()
            (emb(torch.tensor([1, 5, 5, step])) ** 2).sum().backward()
            opt.step()
        weights.append(emb.weight.detach().clone())
    torch.testing.assert_close(weights[0], weights[1])


def test_the_classifier_gives_the_text_input_layer_its_own_group():
    # SparseMLP's lazy_adam_groups: its input layer (a row per feature) keeps one second moment
    # per row and learns at 3x lr; the output layer keeps Adam's per-entry moments at lr. Any
    # group setting of the user's (here optimizer__second_moment) replaces the module's groups.
    import numpy as np

    from hiclass_parallel import Tree
    from hiclass_parallel.estimators import HierarchicalClassifier

    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1])
    X = sparse_rows(40, 12, density=0.3, seed=0)
    y = np.arange(40) % 6
    clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(X, y)
    module, opt = clf.net_.module_, clf.net_.optimizer_
    assert opt.state[module.input.embedding.weight]["exp_avg_sq"].shape == (12, 1)
    assert opt.state[module.head.weight.weight]["exp_avg_sq"].shape == module.head.weight.weight.shape
    # both tables keep bfloat16 first moments; the biases float32
    assert [opt.state[p]["exp_avg"].dtype for p in (module.input.embedding.weight, module.head.weight.weight,
                                                    module.input.bias, module.head.bias.weight)] \
        == [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]
    group = next(g for g in opt.param_groups if any(p is module.input.embedding.weight for p in g["params"]))
    assert (group["second_moment"], group["lr_scale"], group["lr"]) == ("row", 3.0, clf.config_.lr)
    assert len(group["params"]) == 1
    assert {(g["second_moment"], g["lr_scale"]) for g in opt.param_groups if g is not group} == {("entry", 1.0)}
    entry = HierarchicalClassifier(tree, max_epochs=1, random_state=0, optimizer__second_moment="entry").fit(X, y)
    weight = entry.net_.module_.input.embedding.weight
    assert entry.net_.optimizer_.state[weight]["exp_avg_sq"].shape == weight.shape
    assert entry.net_.optimizer_.state[weight]["exp_avg"].dtype == torch.float32
    full = HierarchicalClassifier(tree, max_epochs=1, random_state=0, optimizer__first_moment="float32").fit(X, y)
    assert {str(s["exp_avg"].dtype) for s in full.net_.optimizer_.state.values()} == {"torch.float32"}


def test_lazy_adam_dense_update_equals_torch_adam():
    weights = []
    for make in (lambda ps: LazyAdam(ps, lr=0.05, weight_decay=0.01),
                 lambda ps: torch.optim.Adam(ps, lr=0.05, weight_decay=0.01)):
        torch.manual_seed(0)
        layer = torch.nn.Linear(6, 3)
        opt = make(layer.parameters())
        for step in range(5):
            x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step))
            opt.zero_grad()
            (layer(x) ** 2).sum().backward()
            opt.step()
        weights.append([p.detach().clone() for p in layer.parameters()])
    for ours, theirs in zip(*weights):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_a_text_fit_does_not_import_torch_dynamo():
    # torch's Optimizer imports torch._dynamo (seconds, with sympy) on its first
    # add_param_group / zero_grad; LazyAdam uses the undecorated bodies, so a default text fit
    # in a fresh process does not pay for a compiler it never uses.
    import subprocess
    import sys

    code = (
        "import sys, warnings; warnings.simplefilter('ignore')\n"
        "import numpy as np, scipy.sparse as sp\n"
        "from hiclass_parallel import Tree\n"
        "from hiclass_parallel.estimators import HierarchicalClassifier\n"
        "print('torch._dynamo' in sys.modules)\n"
        "tree = Tree.from_parents([-1, -1, 0, 0, 1, 1])\n"
        "X = sp.random(40, 12, density=0.3, random_state=0, format='csr', dtype=np.float32)\n"
        "y = np.arange(40) % 6\n"
        "clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, y)\n"
        "clf.predict(X)\n"
        "assert clf.config_.optimizer.__name__ == 'LazyAdam'\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    before, after = out.stdout.strip().splitlines()[-2:]
    if before == "True":  # seen with torch 2.11's CUDA build: importing torch already loads it
        import pytest

        pytest.skip("torch._dynamo is loaded before any fit in this environment: nothing for the fit to avoid")
    assert after == "False"
