"""``LazyAdam`` against the updates it must reproduce: its C row update against its torch row
update, and its dense update against ``torch.optim.Adam``."""

from __future__ import annotations

import pytest
import torch

from hiclass_parallel.estimators import LazyAdam
from hiclass_parallel.ops.engine import _native_path_step


@pytest.mark.skipif(not _native_path_step.available(), reason="the C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")
def test_lazy_adam_row_update_equals_the_torch_route(monkeypatch):
    torch.manual_seed(0)
    weights = []
    for native in (True, False):
        if not native:
            monkeypatch.setattr("hiclass_parallel.estimators._optim._native_rows", lambda *a: False)
        torch.manual_seed(0)
        emb = torch.nn.Embedding(50, 16, sparse=True)
        opt = LazyAdam(emb.parameters(), lr=0.05, weight_decay=0.01)
        for step in range(5):
            idx = torch.randint(0, 50, (12,), generator=torch.Generator().manual_seed(step))
            opt.zero_grad()
            (emb(idx) ** 2).sum().backward()
            opt.step()
        weights.append(emb.weight.detach().clone())
    # fast-math rounding (a reciprocal for the division) differs from torch by an ulp or so
    torch.testing.assert_close(weights[0], weights[1], rtol=1e-4, atol=1e-5)


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
