"""Dense class prototypes: the dense defaults' answer with ``prototypes="auto"`` and ``None``.

One fit per data set with the settings of ``bench_peers`` (``TORCH_PARAMS``: 10 epochs, lr
0.003, 256 ReLU units, batch 256, ``random_state=0``); the same fitted model then predicts the
test rows with ``prototypes="auto"`` (the fitted weight) and with ``None`` (the model's own
answer), so the two differ only in the re-ranking. Data sets (comma separated ``--data``):

- ``100``, ``1k``, ``10k``: ``bench_peers``' synthetic sizes; an integer ``N`` any other size
  (as ``bench_peers --sizes N`` builds it);
- ``cubedN``: the same data with every feature cubed (no longer Gaussian around the means);
- ``clusters``: ``make_classification``, 20 classes of 3 clusters each under 5 parents,
  32,000 / 8,000 rows, 20 features (10 informative): a class is not one blob;
- ``svd:ROOT``: a WordNet gloss subtree (lemmas included, split and TF-IDF of ``bench_peers``)
  reduced to 256 dense dimensions by truncated SVD fitted on the training rows.

One JSON line per data set: fit seconds, fitted weight, load average, and hF1 (micro), exact
accuracy and predict seconds for both settings, and for ``prototypes="auto"`` with
``decoding="hf1"`` (``auto_hf1``: the expected-hF1 path among the candidates weighed by the
fitted conditional logit). ``OMP_WAIT_POLICY=PASSIVE`` is set before
torch starts (DESIGN.md, shared cores).

Usage::

    python -m benchmarks.bench_dense_prototypes --data 100,1k,3000,cubed3000,clusters,10k \\
        --out benchmarks/results/dense_prototypes.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load(name: str) -> tuple[dict, dict]:
    """The split data set ``name`` and the classifier settings it needs."""
    from benchmarks.bench_peers import SYNTHETIC, SyntheticSpec, WordNetSpec, make_synthetic, make_wordnet

    if name.startswith("cubed"):
        data, extra = load(name[len("cubed"):])
        return {**data, "X_train": data["X_train"] ** 3, "X_test": data["X_test"] ** 3}, extra
    if name in SYNTHETIC:
        return make_synthetic(SYNTHETIC[name], 0), {}
    if name.isdigit():
        n = int(name)
        return make_synthetic(SyntheticSpec(f"syn-{n}", n, max(8 * n, 2000), max(2 * n, 500)), 0), {}
    if name.startswith("svd:"):
        root = name[len("svd:"):]
        spec = WordNetSpec(f"wn-{root}-svd256", root, loader={"include_lemmas": True}, svd=256)
        return make_wordnet(spec, 0), {"semantics": "terminal"}
    if name == "clusters":
        from sklearn.datasets import make_classification

        from hiclass_parallel import Tree

        X, y = make_classification(n_samples=40_000, n_features=20, n_informative=10, n_classes=20,
                                   n_clusters_per_class=3, random_state=0)
        tree = Tree.from_parents([-1] * 5 + [leaf // 4 for leaf in range(20)])
        ids, X = (y + 5).astype(np.int64), X.astype(np.float32)
        return {"X_train": X[:32_000], "X_test": X[32_000:], "y_train": ids[:32_000], "y_test": ids[32_000:],
                "tree": tree}, {}
    raise SystemExit(f"unknown data set {name!r}: see the module docstring")


def hf1_and_exact(tree, true: np.ndarray, predicted: np.ndarray) -> tuple[float, float]:
    """Micro hierarchical F1 of node ids (ancestor sets from the paths) and exact accuracy."""
    from hiclass_parallel.metrics import hierarchical_f1_score

    hf1 = hierarchical_f1_score(tree.paths[true], tree.paths[predicted], tree, input_type="ids")
    return float(hf1), float(np.mean(true == predicted))


def run(name: str) -> dict:
    from benchmarks.bench_peers import TORCH_PARAMS
    from hiclass_parallel import HierarchicalClassifier

    data, extra = load(name)
    tree = data["tree"]
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    clf = HierarchicalClassifier(tree=tree, **{**TORCH_PARAMS, **extra})
    clf.fit(data["X_train"], tree.labels[data["y_train"]])
    row = {"data": name, "fit_s": round(time.perf_counter() - start, 1), "weight": clf.answer_.weight("prototypes"),
           "load": round(load_before, 2), "params": extra}
    for label, setting, decoding in (("auto", "auto", "best"), ("none", None, "best"), ("auto_hf1", "auto", "hf1")):
        clf.set_params(prototypes=setting, decoding=decoding)
        start = time.perf_counter()
        predicted = np.asarray(clf.predict_node(data["X_test"]), dtype=np.int64)
        seconds = time.perf_counter() - start
        hf1, exact = hf1_and_exact(tree, data["y_test"], predicted)
        row[label] = {"hf1": round(hf1, 4), "exact": round(exact, 4), "predict_s": round(seconds, 2)}
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="100,1k,3000,cubed3000,clusters,10k")
    parser.add_argument("--out", default=None, help="append the JSON lines to this file")
    args = parser.parse_args(argv)
    rows = []
    for name in args.data.split(","):
        row = run(name.strip())
        print(json.dumps(row), flush=True)
        rows.append(row)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
    return rows


if __name__ == "__main__":
    main()
