"""Shared fixtures: the paper's toy tree, random trees with shuffled ids, array namespaces.

Tests take these as fixtures; nothing here is imported by test modules (shared helpers are
``support.py``, which this file uses too).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from support import renumbered

from hiclass_parallel import Tree

# Hypothesis profiles. "fuzz" runs 1,000 examples per property of the fuzz suite
# (tests/trees/test_fuzz.py, which otherwise runs a modest number in CI):
#     HYPOTHESIS_PROFILE=fuzz python -m pytest tests/trees/test_fuzz.py -p no:randomly
# Tests that set their own max_examples keep it under any profile.
settings.register_profile(
    "fuzz", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
if os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile(os.environ["HYPOTHESIS_PROFILE"])



@pytest.fixture(scope="session", autouse=True)
def ctrl_c_reaches_python():
    """Python's own Ctrl-C handler for the session, where the run was started with SIGINT
    ignored (a shell starts a background job, ``pytest ... &``, that way): the interrupt tests
    call the handler, or send SIGINT to a child that would inherit the ignoring."""
    main = threading.current_thread() is threading.main_thread()
    ignored = main and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


# The paper's Figure 1 with ids shifted to 0-based: 1 dog, 2 cat, 3 small dog, 4 big dog,
# 5 sleepy cat, 6 curious cat, 7 happy big dog, 8 moody big dog, 9 Hound of Hades.
PAPER_PARENTS = [-1, -1, 0, 0, 1, 1, 3, 3, 3]
PAPER_NAMES = ["dog", "cat", "small dog", "big dog", "sleepy cat", "curious cat",
               "happy big dog", "moody big dog", "Hound of Hades"]


def _torch_threads(n: int):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_torch_thread():
    """Run a test with one torch thread: for tiny models, and CI shares its two cores."""
    yield from _torch_threads(1)


@pytest.fixture
def two_torch_threads():
    """Run a test with two torch threads (whatever the machine's default), put back after."""
    yield from _torch_threads(2)


@pytest.fixture
def paper_tree() -> Tree:
    return Tree.from_parents(PAPER_PARENTS)


class RandomTrees:
    """Random trees with shuffled node ids: node order says nothing about depth.

    ``random_tree(seed, n, max_top=3)`` is a :class:`Tree` of ``n`` classes under 1 to
    ``max_top`` top-level classes; ``seed`` may be a ``np.random.Generator``, which is then
    drawn from (tests that go on drawing scores from it keep their numbers).
    """

    @staticmethod
    def parents(rng: np.random.Generator, n: int, max_top: int = 3) -> np.ndarray:
        """The parent array of a random tree (each node's parent drawn among earlier nodes), ids shuffled."""
        parents = np.full(n, -1, dtype=np.int64)
        n_top = int(rng.integers(1, max_top + 1))
        for i in range(n_top, n):
            parents[i] = rng.integers(0, i)
        return RandomTrees.shuffle(parents, rng)

    @staticmethod
    def shuffle(parents: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The same tree with its node ids permuted at random."""
        return renumbered(parents, rng.permutation(len(parents)))

    def __call__(self, seed: int | np.random.Generator, n: int, max_top: int = 3) -> Tree:
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return Tree.from_parents(self.parents(rng, n, max_top))


@pytest.fixture(scope="session")
def random_tree() -> RandomTrees:
    """The random-tree factory (session-scoped, so hypothesis tests can take it)."""
    return RandomTrees()


@pytest.fixture(scope="session")
def paper_names() -> list[str]:
    return list(PAPER_NAMES)


@pytest.fixture(scope="session")
def paper_parents() -> list[int]:
    return list(PAPER_PARENTS)


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


@pytest.fixture
def decoding_routes_ran(monkeypatch):
    """The decoding engines that run, in order: ``"best_first_c"`` (the C search),
    ``"best_first_torch"`` (the torch search) or ``"exhaustive"`` (best_paths, topk_paths)."""
    from hiclass_parallel.ops import best_first, decode
    from hiclass_parallel.ops.engine import _native_best_first

    from hiclass_parallel.estimators.prediction import _decode

    ran: list[str] = []
    for module, name, route in ((_native_best_first, "search", "best_first_c"),
                                (best_first, "_search_torch", "best_first_torch"),
                                (decode, "best_paths", "exhaustive"), (decode, "topk_paths", "exhaustive")):
        real = getattr(module, name)
        spy = lambda *a, _real=real, _route=route, **k: ran.append(_route) or _real(*a, **k)  # noqa: E731
        monkeypatch.setattr(module, name, spy)
        if getattr(_decode, name, None) is real:  # decoding imports the function by name: spy on its name too
            monkeypatch.setattr(_decode, name, spy)
    return ran
