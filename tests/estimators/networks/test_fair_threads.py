"""Training on shared cores: the OpenMP wait policy set at import, the threads chosen in fit."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hiclass_parallel import Tree
from hiclass_parallel.estimators.fitting._fit import training_threads


def _policy_after(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code + "\nimport os; print(os.environ.get('OMP_WAIT_POLICY'))"],
                         env={**clean, **env}, capture_output=True, text=True, check=True, timeout=300)
    return out.stdout.strip().splitlines()[-1]


def test_import_sets_a_passive_wait_policy_only_before_torch_and_unset():
    assert _policy_after("import hiclass_parallel") == "PASSIVE"
    assert _policy_after("import hiclass_parallel\nimport sys; assert 'torch' not in sys.modules") == "PASSIVE"
    # torch loaded first: its OpenMP runtime has read the variable, the package leaves it alone
    assert _policy_after("import torch\nimport hiclass_parallel") == "None"
    assert _policy_after("import hiclass_parallel", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"


@pytest.mark.parametrize(("policy", "device", "inside"), [
    (None, "cpu", 1),  # libgomp's spinning default: one thread
    ("PASSIVE", "cpu", 2),
    ("ACTIVE", "cpu", 2),  # the user's choice
    (None, "cuda", 2),
])
def test_training_threads(monkeypatch, two_torch_threads, policy, device, inside):
    if policy is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    with training_threads(SimpleNamespace(device=device)):
        assert torch.get_num_threads() == inside
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), training_threads(SimpleNamespace(device=device)):
        raise RuntimeError("put back on errors too")
    assert torch.get_num_threads() == 2


def test_fit_trains_with_one_thread_where_openmp_would_spin(monkeypatch, two_torch_threads):
    import scipy.sparse
    from skorch.callbacks import Callback

    from hiclass_parallel import HierarchicalClassifier

    seen = []

    class Threads(Callback):
        def on_epoch_begin(self, net, **kwargs):
            seen.append(torch.get_num_threads())

    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1])
    X = scipy.sparse.random(60, 20, density=0.3, format="csr", dtype=np.float32, random_state=0)
    y = np.tile(np.arange(tree.n_classes), 10)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    clf = HierarchicalClassifier(tree, max_epochs=2, callbacks=[Threads()], random_state=0).fit(X, y)
    clf.partial_fit(X, y)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    clf.partial_fit(X, y)
    assert seen == [1, 1, 1, 2]
    assert torch.get_num_threads() == 2
