"""Serving latency: ``HierarchicalClassifier.predict`` vs the exported module (eager, torch.export, onnxruntime).

WordNet glosses under a root (default ``person.n.01``, 10,292 classes), TF-IDF sublinear 1-2-grams
(min_df 2), the default model for sparse text (``SparseMLP``, sibling partition, path-local
training, best-first decoding in ``predict``), trained for ``--epochs``. Then, on ``--rows``
held-out rows, the time per row of:

- ``predict`` on the sparse matrix (best-first exact decoding), batch 256 (the classifier's default);
- the exported module (:func:`hiclass_parallel.estimators.serving_module`) on dense float32 input,
  eager, batch 256 and batch 1;
- the ONNX graph (:func:`hiclass_parallel.estimators.export_onnx`) in onnxruntime (CPU, threads as
  set), batch 256 and batch 1.

Every route's paths are checked identical to ``predict``'s. Medians of ``--repeat`` rounds; the
load average is printed with the results. Thread settings: ``OMP_NUM_THREADS`` (default 1 here) and
``OMP_WAIT_POLICY=PASSIVE``.

Run::

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE python -m benchmarks.bench_export
    python -m benchmarks.bench_export --root animal.n.01 --rows 1000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _batched(fn, X, batch: int):
    return [fn(X[i:i + batch]) for i in range(0, X.shape[0], batch)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="person.n.01")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

    import onnxruntime
    from sklearn.feature_extraction.text import TfidfVectorizer

    from hiclass_parallel.datasets import load_wordnet_glosses
    from hiclass_parallel.estimators import HierarchicalClassifier, export_onnx, serving_module

    data = load_wordnet_glosses(args.root, include_lemmas=True)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(data.data))
    test, train = order[: args.rows], order[args.rows:]
    vec = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2, dtype=np.float32)
    X_train = vec.fit_transform([data.data[i] for i in train])
    X_test = vec.transform([data.data[i] for i in test])
    clf = HierarchicalClassifier(data.tree, max_epochs=args.epochs, random_state=0)
    t = time.perf_counter()
    clf.fit(X_train, data.target[train])
    fit_s = time.perf_counter() - t
    dense = X_test.toarray()
    lookup = np.append(clf.classes_.astype(object), clf.pad_label_)
    expected = clf.predict(X_test)

    module = serving_module(clf)
    with tempfile.TemporaryDirectory() as d:
        path = export_onnx(clf, os.path.join(d, "model.onnx"), dense[:2])
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = int(os.environ["OMP_NUM_THREADS"])
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def eager(Xb):
        with torch.no_grad():
            return module(torch.from_numpy(Xb))[0].numpy()

    def onnx(Xb):
        return session.run(["paths"], {"X": Xb})[0]

    for name, fn in (("eager", eager), ("onnx", onnx)):
        got = lookup[np.concatenate(_batched(fn, dense, 256))]
        assert (got == expected).all(), f"{name} paths differ from predict"

    rows = dense.shape[0]
    results = {
        "predict (sparse X, best-first), batch 256": _median_time(lambda: clf.predict(X_test), args.repeat),
        "exported module, eager torch, batch 256": _median_time(lambda: _batched(eager, dense, 256), args.repeat),
        "exported module, eager torch, batch 1": _median_time(lambda: _batched(eager, dense[:200], 1), args.repeat)
        * rows / 200,
        "ONNX in onnxruntime, batch 256": _median_time(lambda: _batched(onnx, dense, 256), args.repeat),
        "ONNX in onnxruntime, batch 1": _median_time(lambda: _batched(onnx, dense[:200], 1), args.repeat)
        * rows / 200,
    }
    print(f"root {args.root}: {data.tree.n_classes:,} classes, {data.tree.n_levels} levels, "
          f"{X_train.shape[1]:,} features, {len(train):,} training rows, fit {fit_s:.1f} s "
          f"({args.epochs} epochs); {rows} test rows; paths identical on every route")
    print(f"threads {os.environ['OMP_NUM_THREADS']}, load average {os.getloadavg()[0]:.2f}, torch {torch.__version__}, "
          f"onnxruntime {onnxruntime.__version__}")
    base = results["predict (sparse X, best-first), batch 256"]
    print("| route | us per row | vs predict |\n| --- | ---: | ---: |")
    for name, seconds in results.items():
        print(f"| {name} | {seconds / rows * 1e6:,.0f} | {seconds / base:.2f}x |")


if __name__ == "__main__":
    main()
