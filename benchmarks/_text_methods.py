"""The methods of :mod:`benchmarks.bench_text`: what a user with text and a big taxonomy picks.

Same interface as :mod:`benchmarks._peers` (``fit(X, y)`` with node ids, ``predict_paths(X)``
returning node-id paths), so the same worker (:mod:`benchmarks._worker`) runs them in fresh
processes with their own peak memory:

- ``hc-text``: ``HierarchicalClassifier(tree, semantics="terminal")`` and nothing else set
  (the defaults for sparse input: ``SparseMLP``, sibling partition, path-local training,
  best-first decoding);
- ``hc-text-tuned``: the same with settings from ``params``;
- ``linear-svc`` / ``sgd``: scikit-learn's ``LinearSVC()`` and ``SGDClassifier()`` with their
  defaults, flat over the training targets (one class per distinct target node);
- ``xr-linear``: libpecos's XR-Linear (PIFA label embedding, hierarchical k-means label
  tree, linear rankers), a label-tree XMC model. libpecos pins old NumPy/SciPy, so it runs
  in its own environment: set ``PECOS_PYTHON`` to that environment's python (the benchmark
  writes the data, runs :mod:`benchmarks._pecos_job` there, and reads the predictions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

TEXT_METHODS = ("hc-text", "hc-text-tuned", "hc-text-classtext", "linear-svc", "sgd", "xr-linear")


def unavailable_reason(method: str) -> str | None:
    if method == "xr-linear":
        python = os.environ.get("PECOS_PYTHON")
        if not python or not Path(python).exists():
            return "libpecos needs its own environment: set PECOS_PYTHON to its python (see benchmarks/_pecos_job.py)"
    return None


class TextClassifier:
    """``HierarchicalClassifier`` with terminal semantics; ``params`` override the defaults."""

    def __init__(self, tree: Any, **params: Any):
        self.tree, self.params = tree, params

    def fit(self, X: Any, y: np.ndarray) -> TextClassifier:
        import scipy.sparse

        from hiclass_parallel.estimators import HierarchicalClassifier

        params = dict(self.params)
        path = params.pop("class_features_path", None)
        if path is not None:  # hc-text-classtext: the classes' own text, saved by bench_text
            params["module__class_features"] = scipy.sparse.load_npz(path).tocsr()
        self.model_ = HierarchicalClassifier(self.tree, semantics="terminal", **params).fit(X, np.asarray(y))
        self.n_epochs_ = len(self.model_.net_.history)
        return self

    def predict_paths(self, X: Any) -> np.ndarray:
        from benchmarks._peers import ids_of_label_paths

        return ids_of_label_paths(self.tree, self.model_.predict(X), self.model_.pad_label_)


class FlatLinear:
    """A flat scikit-learn linear classifier over the distinct training targets."""

    def __init__(self, kind: str, tree: Any, **params: Any):
        self.kind, self.tree, self.params = kind, tree, params

    def fit(self, X: Any, y: np.ndarray) -> FlatLinear:
        from sklearn.linear_model import SGDClassifier
        from sklearn.svm import LinearSVC

        cls = LinearSVC if self.kind == "linear-svc" else SGDClassifier
        self.model_ = cls(**self.params).fit(X, np.asarray(y))
        return self

    def predict_paths(self, X: Any) -> np.ndarray:
        return np.asarray(self.tree.paths, dtype=np.int64)[self.model_.predict(X)]


class XRLinear:
    """libpecos XR-Linear, run in its own environment (``PECOS_PYTHON``)."""

    def __init__(self, tree: Any, **params: Any):
        self.tree, self.params = tree, params
        self.folder = Path(tempfile.mkdtemp(prefix="xr-linear-"))

    def _run(self, mode: str, X: Any, y: np.ndarray | None = None) -> dict[str, Any]:
        import scipy.sparse

        scipy.sparse.save_npz(self.folder / f"X_{mode}.npz", scipy.sparse.csr_matrix(X, dtype=np.float32))
        if y is not None:
            np.save(self.folder / "y.npy", np.asarray(y, dtype=np.int64))
        job = {"mode": mode, "folder": str(self.folder), "params": self.params}
        here = Path(__file__).with_name("_pecos_job.py")
        env = {**os.environ, "PYTHONPATH": ""}
        done = subprocess.run([os.environ["PECOS_PYTHON"], str(here), json.dumps(job)], env=env,
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"XR-Linear {mode} failed: {done.stderr[-2000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def fit(self, X: Any, y: np.ndarray) -> XRLinear:
        self.inner_fit_s_ = self._run("fit", X, y)["seconds"]
        return self

    def predict_paths(self, X: Any) -> np.ndarray:
        out = self._run("predict", X)
        self.inner_predict_s_ = out["seconds"]
        return np.asarray(self.tree.paths, dtype=np.int64)[np.load(self.folder / "pred.npy")]


def make_text_method(method: str, tree: Any, params: dict | None = None) -> Any:
    params = dict(params or {})
    if method in ("hc-text", "hc-text-tuned", "hc-text-classtext"):
        return TextClassifier(tree, **params)
    if method in ("linear-svc", "sgd"):
        return FlatLinear(method, tree, **params)
    if method == "xr-linear":
        return XRLinear(tree, **params)
    raise ValueError(f"unknown method {method!r}; choose from {TEXT_METHODS}")


def warm_up(method: str, params: dict | None = None, n_features: int = 8) -> None:
    """One toy fit on sparse input, so one-time process costs (torch's first optimizer step
    imports torch._dynamo: seconds) are not timed; the peers' toy fits cost milliseconds."""
    import scipy.sparse

    from hiclass_parallel import Tree

    if method == "xr-linear":
        return
    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    # About 20 non-zeros a row, as text has: a denser toy on 483,569 features would make the
    # warm-up's own sparse gradients (non-zeros x hidden) the process's peak memory.
    density = min(0.2, 20 / max(n_features, 1))
    X = scipy.sparse.random(64, n_features, density=density, format="csr", dtype=np.float32, random_state=0)
    y = np.tile(np.arange(tree.n_classes), 8)[:64]
    params = dict(params or {})
    params.pop("class_features_path", None)  # the toy tree has other classes
    if method.startswith("hc-"):
        params["max_epochs"] = 1
    model = make_text_method(method, tree, params)
    model.fit(X, y)
    model.predict_paths(X)
