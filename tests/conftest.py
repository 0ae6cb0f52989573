"""Shared fixtures: the paper's toy tree, random trees with shuffled ids, array namespaces."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from hiclass_parallel import Tree

# Hypothesis profiles. "fuzz" runs 1,000 examples per property of the fuzz suite
# (tests/test_fuzz.py, which otherwise runs a modest number in CI):
#     HYPOTHESIS_PROFILE=fuzz python -m pytest tests/test_fuzz.py -p no:randomly
# Tests that set their own max_examples keep it under any profile.
settings.register_profile(
    "fuzz", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])

# The paper's Figure 1 with ids shifted to 0-based: 1 dog, 2 cat, 3 small dog, 4 big dog,
# 5 sleepy cat, 6 curious cat, 7 happy big dog, 8 moody big dog, 9 Hound of Hades.
PAPER_PARENTS = [-1, -1, 0, 0, 1, 1, 3, 3, 3]
PAPER_NAMES = ["dog", "cat", "small dog", "big dog", "sleepy cat", "curious cat",
               "happy big dog", "moody big dog", "Hound of Hades"]


@pytest.fixture
def one_torch_thread():
    """Run a test with one torch thread: for tiny models, and CI shares its two cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def paper_tree() -> Tree:
    return Tree.from_parents(PAPER_PARENTS)


def random_parents(rng: np.random.Generator, n: int, max_top: int = 3) -> np.ndarray:
    """A random tree with shuffled node ids: node order says nothing about depth."""
    parents = np.full(n, -1, dtype=np.int64)
    n_top = int(rng.integers(1, max_top + 1))
    for i in range(n_top, n):
        parents[i] = rng.integers(0, i)
    perm = rng.permutation(n)  # new id of old node i is perm[i]
    shuffled = np.full(n, -1, dtype=np.int64)
    has_parent = parents >= 0
    shuffled[perm[has_parent]] = perm[parents[has_parent]]
    return shuffled


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _cupy_usable() -> tuple[bool, str]:
    if not _have("cupy"):
        return False, "cupy is not installed (pip install hiclass_parallel[gpu] on a CUDA machine)"
    try:
        import cupy

        cupy.zeros(1)
        return True, ""
    except Exception as exc:  # no driver / no device
        return False, f"cupy cannot reach a CUDA device: {exc}"


def _torch_cuda() -> tuple[bool, str]:
    import torch

    return torch.cuda.is_available(), "torch sees no CUDA device"


CUPY_OK, CUPY_REASON = _cupy_usable()
TORCH_CUDA_OK, TORCH_CUDA_REASON = _torch_cuda()


def _to_numpy(x):
    return np.asarray(x)


def _to_torch(x):
    import torch

    return torch.as_tensor(np.asarray(x))


def _to_torch_cuda(x):
    import torch

    return torch.as_tensor(np.asarray(x), device="cuda")


def _to_strict(x):
    import array_api_strict

    return array_api_strict.asarray(np.asarray(x))


def _to_cupy(x):
    import cupy

    return cupy.asarray(np.asarray(x))


NAMESPACES = [
    pytest.param(_to_numpy, id="numpy"),
    pytest.param(_to_torch, id="torch"),
    pytest.param(_to_strict, id="array_api_strict",
                 marks=pytest.mark.skipif(not _have("array_api_strict"), reason="array-api-strict is not installed")),
    pytest.param(_to_torch_cuda, id="torch_cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not TORCH_CUDA_OK, reason=TORCH_CUDA_REASON)]),
    pytest.param(_to_cupy, id="cupy", marks=[pytest.mark.gpu, pytest.mark.skipif(not CUPY_OK, reason=CUPY_REASON)]),
]


@pytest.fixture(params=NAMESPACES)
def to_xp(request):
    """Converts a NumPy array to one namespace/device; tests then compare on the host."""
    return request.param


def host(x) -> np.ndarray:
    from hiclass_parallel._backend import to_numpy

    return np.asarray(to_numpy(x))
