"""Benchmark ``HierarchicalClassifier`` against its peers: speed, memory, accuracy, scale.

One run fits every method on the same split of the same data and scores all predictions
with the same functions of :mod:`hiclass_parallel.metrics`:

- ``hc-auto``, ``hc-level`` and ``hc-sibling``: :class:`~hiclass_parallel.HierarchicalClassifier`
  with its default ``partition="auto"`` (the sibling partition, path-local training and
  best-first decoding for the default modules), the level (paper) and the sibling
  (conditional softmax) partitions;
- ``flat-torch``: the same default torch module trained with plain cross-entropy over all
  classes, predicting one class whose ancestral path is the prediction;
- ``hiclass-lcppn``, ``hiclass-lcpn``, ``hiclass-flat``: HiClass 5
  ``LocalClassifierPerParentNode``, ``LocalClassifierPerNode`` and ``FlatClassifier`` with
  scikit-learn's default ``LogisticRegression`` (optional, benchmark-only dependency).

Data: :func:`hiclass_parallel.datasets.make_hierarchical_classification` trees of about
100, 1,000, 10,000 and 100,000 nodes (some labels truncated to ancestors), and the WordNet
gloss data set on two subtrees (TF-IDF features).

Every fit and predict runs in its own process (``benchmarks/_worker.py``) with a wall-clock
budget: a method that cannot finish is reported as a time-out, not a crash, and by default
is not tried again on larger data. Peak memory is the worker's resident-set high-water mark
(``ru_maxrss``), which includes the interpreter, the libraries and the data; the table also
shows the growth over the RSS measured just before ``fit``.

Usage::

    python -m benchmarks.bench_peers --quick --out /tmp/bench   # seconds; what the tests run
    python -m benchmarks.bench_peers                             # full run, about an hour
    python benchmarks/bench_peers.py --sizes 100,1k --methods hc-level,hiclass-lcppn

Outputs in ``--out`` (default ``benchmarks/results``): ``bench_peers.json`` (every figure),
``bench_peers.md`` (the table) and ``bench_peers.png`` (time and hF1 against tree size).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._peers import ALL_METHODS, HC_METHODS, HICLASS_METHODS, TORCH_METHODS, unavailable_reason

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results"

# OpenMP threads that wait by sleeping, not spinning. On a CPU shared with other work (this
# machine runs other jobs) torch's spinning threads slowed a training epoch 10-20x
# (0.6 s -> 11 s measured); idle, it makes no difference. Set for every worker, all methods.
OMP_WAIT_POLICY = "PASSIVE"

METHOD_NAMES = {
    "hc-auto": "HierarchicalClassifier (defaults)",
    "hc-level": "HierarchicalClassifier (level)",
    "hc-sibling": "HierarchicalClassifier (sibling)",
    "flat-torch": "flat torch baseline (CE)",
    "hiclass-lcppn": "HiClass LCPPN + LR",
    "hiclass-lcpn": "HiClass LCPN + LR",
    "hiclass-flat": "HiClass Flat + LR",
    "hiclass-lcppn-svc": "HiClass LCPPN + LinearSVC",
}


# ---------------------------------------------------------------------------- settings
@dataclass
class SyntheticSpec:
    """One synthetic data set: a random tree of about ``n_nodes`` classes."""

    name: str
    n_nodes: int
    n_train: int
    n_test: int
    n_features: int = 64
    generator: dict = field(default_factory=dict)  # extra make_hierarchical_classification args
    torch: dict = field(default_factory=dict)  # overrides of the torch methods' settings

    @property
    def kind(self) -> str:
        return "synthetic"


@dataclass
class WordNetSpec:
    """The WordNet gloss data set on the subtree under ``root``."""

    name: str
    root: str
    test_size: float = 0.2
    max_features: int = 5000
    loader: dict = field(default_factory=dict)  # extra load_wordnet_glosses args
    torch: dict = field(default_factory=dict)  # overrides of the torch methods' settings
    hc: dict = field(default_factory=dict)  # overrides of HierarchicalClassifier's settings
    svd: int = 0  # > 0: dense features, a TruncatedSVD of the TF-IDF (fitted on the training split)

    @property
    def kind(self) -> str:
        return "wordnet"


# The generator's defaults (class_sep 1, drift 0.5, noise 1) with 64 features: siblings deep
# in the tree overlap, so the methods differ; 15% of the labels are cut to an ancestor.
GENERATOR = {"noise": 1.0, "truncate_fraction": 0.15, "labels": "int"}

# Complete trees with 10 children per class: 110, 1,110, 11,110 and 111,110 nodes. The
# 11,110-node size is the reference setting (80,000 training rows, 64 features).
# An epoch costs O(rows x classes) for every softmax model (ours and the flat baseline), so
# the larger trees get fewer epochs (and the largest fewer rows) to fit the run in an hour on
# 2 shared cores; docs/performance.md says so next to the table.
SYNTHETIC = {
    "100": SyntheticSpec("syn-100", 110, 8_000, 2_000, generator={"branching": 10, "depth": 2}),
    "1k": SyntheticSpec("syn-1k", 1_110, 20_000, 5_000, generator={"branching": 10, "depth": 3}),
    "10k": SyntheticSpec("syn-10k", 11_110, 80_000, 20_000, generator={"branching": 10, "depth": 4},
                         torch={"max_epochs": 3}),
    "100k": SyntheticSpec("syn-100k", 111_110, 30_000, 10_000, generator={"branching": 10, "depth": 5},
                          torch={"max_epochs": 1}),
}
QUICK_SYNTHETIC = {
    "quick": SyntheticSpec("syn-quick", 39, 600, 200, n_features=16, generator={"branching": 3, "depth": 3}),
}

# Glosses with lemma names (include_lemmas=True) on two subtrees of different size:
# 1,176 classes (10 levels) and 10,504 classes (12 levels); one sample per synset. Every
# target is a parent synset, an internal node that is itself the answer, so the classifier
# uses semantics="terminal" (stop scores; predictions may end at any node).
_TERMINAL = {"semantics": "terminal"}
WORDNET = {
    # 940 training rows are 4 steps of 256 per epoch: 40 epochs (160 steps) for both torch models.
    "mammal": WordNetSpec("wn-mammal", "mammal.n.01", loader={"include_lemmas": True}, hc=_TERMINAL,
                          torch={"max_epochs": 40}),
    "artifact": WordNetSpec("wn-artifact", "artifact.n.01", loader={"include_lemmas": True}, hc=_TERMINAL),
    # Dense input from real text: 256 SVD components of the same TF-IDF (sentence-embedding-like
    # features; every method gets the same dense matrix).
    "artifact-svd": WordNetSpec("wn-artifact-svd256", "artifact.n.01", loader={"include_lemmas": True},
                                hc=_TERMINAL, svd=256),
}

# HierarchicalClassifier settings (the flat baseline gets the same ones). Chosen once for
# all sizes, stated in docs/performance.md; the peers keep their defaults.
TORCH_PARAMS = {"max_epochs": 10, "lr": 3e-3, "batch_size": 256, "module__hidden_units": 256, "random_state": 0}
QUICK_TORCH_PARAMS = {"max_epochs": 3, "lr": 1e-2, "batch_size": 128, "module__hidden_units": 32, "random_state": 0}

# Budgets (seconds per fit + predict). LocalClassifierPerParentNode, the main peer, gets more
# than the other HiClass models so that the 10,000-node comparison has its figure.
METHOD_BUDGETS = {"hiclass-lcppn": 600.0}


# ---------------------------------------------------------------------------- data
def make_synthetic(spec: SyntheticSpec, seed: int) -> dict[str, Any]:
    """Generate a synthetic data set and split it; returns arrays and a description."""
    from hiclass_parallel.datasets import make_hierarchical_classification

    kwargs = {**GENERATOR, **spec.generator}
    X, y, tree = _call_generator(make_hierarchical_classification, spec, kwargs, seed)
    ids = np.asarray(tree.to_ids(np.asarray(y)), dtype=np.int64)
    X = np.asarray(X, dtype=np.float32)
    n_train = spec.n_train
    return {
        "X_train": X[:n_train], "X_test": X[n_train:],
        "y_train": ids[:n_train], "y_test": ids[n_train:],
        "tree": tree,
    }


def _call_generator(fn: Any, spec: SyntheticSpec, kwargs: dict, seed: int) -> tuple:
    """Call the generator with the argument names its signature uses."""
    import inspect

    params = inspect.signature(fn).parameters
    call: dict[str, Any] = {}
    aliases = {
        "n_samples": spec.n_train + spec.n_test,
        "n_features": spec.n_features,
        "random_state": seed,
    }
    if "branching" not in kwargs or "depth" not in kwargs:  # not a complete tree: say how many nodes
        aliases["n_classes"] = spec.n_nodes
        kwargs.setdefault("depth", max(2, int(round(np.log10(spec.n_nodes)))))
    for name, value in aliases.items():
        if name in params:
            call[name] = value
    for name, value in kwargs.items():
        if name in params:
            call[name] = value
    out = fn(**call)
    if isinstance(out, tuple):
        X, y, tree = out[:3]
    else:  # a Bunch
        X, y, tree = out["data"], out["target"], out["tree"]
    return X, y, tree


def make_wordnet(spec: WordNetSpec, seed: int) -> dict[str, Any]:
    """The WordNet gloss data set on one subtree, split and TF-IDF encoded (sparse)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split

    from hiclass_parallel.datasets import load_wordnet_glosses

    out = load_wordnet_glosses(root=spec.root, **spec.loader)
    if isinstance(out, tuple):
        texts, y, tree = out[:3]
    else:
        texts, y, tree = out["data"], out["target"], out["tree"]
    ids = np.asarray(tree.to_ids(np.asarray(y, dtype=object)), dtype=np.int64)
    texts = np.asarray(texts, dtype=object)
    t_train, t_test, y_train, y_test = train_test_split(texts, ids, test_size=spec.test_size, random_state=seed)
    vec = TfidfVectorizer(max_features=spec.max_features, sublinear_tf=True, dtype=np.float32)
    X_train, X_test = vec.fit_transform(t_train).tocsr(), vec.transform(t_test).tocsr()
    if spec.svd:
        from sklearn.decomposition import TruncatedSVD

        svd = TruncatedSVD(spec.svd, random_state=seed).fit(X_train)
        X_train, X_test = (svd.transform(X).astype(np.float32) for X in (X_train, X_test))
    return {"X_train": X_train, "X_test": X_test, "y_train": y_train, "y_test": y_test, "tree": tree}


def save_split(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Save a split for the workers; returns its description."""
    import scipy.sparse

    folder.mkdir(parents=True, exist_ok=True)
    for part in ("X_train", "X_test"):
        X = data[part]
        for stale in (folder / f"{part}.npy", folder / f"{part}.sparse.npz"):
            stale.unlink(missing_ok=True)
        if scipy.sparse.issparse(X):
            scipy.sparse.save_npz(folder / f"{part}.sparse.npz", X.tocsr())
        else:
            np.save(folder / f"{part}.npy", np.ascontiguousarray(X))
    tree = data["tree"]
    np.save(folder / "y_train.npy", np.asarray(data["y_train"], dtype=np.int64))
    np.save(folder / "y_test.npy", np.asarray(data["y_test"], dtype=np.int64))
    np.save(folder / "parents.npy", np.asarray(tree.parents, dtype=np.int64))
    y_all = np.concatenate([data["y_train"], data["y_test"]])
    is_leaf = np.asarray(tree.is_leaf)
    return {
        "n_nodes": int(tree.n_classes),
        "n_levels": int(tree.n_levels),
        "n_leaves": int(is_leaf.sum()),
        "n_train": int(data["X_train"].shape[0]),
        "n_test": int(data["X_test"].shape[0]),
        "n_features": int(data["X_train"].shape[1]),
        "sparse": bool(scipy.sparse.issparse(data["X_train"])),
        "internal_label_fraction": float((~is_leaf[y_all]).mean()),
        "classes_seen_in_train": int(np.unique(data["y_train"]).size),
    }


# ---------------------------------------------------------------------------- scoring
def score(tree: Any, y_true: np.ndarray, pred_paths: np.ndarray) -> dict[str, float]:
    """The library's metrics, identical for every method (node ids in, node identity by id)."""
    from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_f1_score, mistake_severity

    true_paths = np.asarray(tree.paths, dtype=np.int64)[np.asarray(y_true)]
    kw = {"input_type": "ids"}
    return {
        "hf1": float(hierarchical_f1_score(true_paths, pred_paths, tree, average="micro", **kw)),
        "exact": float(exact_path_accuracy_score(true_paths, pred_paths, tree, **kw)),
        "severity": float(mistake_severity(true_paths, pred_paths, tree, zero_division=0.0, **kw)),
    }


# ---------------------------------------------------------------------------- jobs
def _spec_key(spec: Any) -> dict[str, Any]:
    """The data set's part of a job's identity (its torch overrides live in the params)."""
    d = asdict(spec)
    d.pop("torch", None)
    d.pop("hc", None)
    return d


def _job_key(job: dict[str, Any]) -> str:
    stable = {k: v for k, v in job.items() if k not in ("out",)}
    return hashlib.sha1(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:12]


def run_worker(job: dict[str, Any], budget_s: float, grace_s: float, log: Any) -> dict[str, Any]:
    """Run one job in a fresh process; a job past ``budget_s + grace_s`` is a time-out."""
    out = Path(job["out"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").unlink(missing_ok=True)
    (out / "job.json").write_text(json.dumps(job, indent=2))
    cmd = [sys.executable, "-m", "benchmarks._worker", str(out / "job.json")]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("OMP_WAIT_POLICY", OMP_WAIT_POLICY)
    start = time.perf_counter()
    with open(out / "worker.log", "w") as wlog:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=wlog, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=budget_s + grace_s)
        except subprocess.TimeoutExpired:
            # The whole process group: joblib workers of HiClass included.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return {"method": job["method"], "status": "timeout", "budget_s": budget_s,
                    "wall_s": time.perf_counter() - start}
    wall = time.perf_counter() - start
    result_file = out / "result.json"
    if not result_file.exists():
        tail = (out / "worker.log").read_text()[-2000:]
        return {"method": job["method"], "status": "error", "wall_s": wall,
                "error": f"worker exited with code {proc.returncode} and no result: {tail}"}
    result = json.loads(result_file.read_text())
    result["wall_s"] = wall
    result["budget_s"] = budget_s
    if result.get("status") == "ok" and result.get("fit_s", 0) + result.get("predict_s", 0) > budget_s:
        result["status"] = "timeout"  # finished inside the grace period only
    if result.get("status") == "error":
        print(f"    error: {result.get('error')}", file=log, flush=True)
    return result


def run_in_process(job: dict[str, Any], budget_s: float, grace_s: float, log: Any) -> dict[str, Any]:
    """Run one job in this process (``--in-process``): no time-out, no per-job peak memory."""
    from benchmarks._worker import run_job

    start = time.perf_counter()
    result = run_job(job)
    result["wall_s"] = time.perf_counter() - start
    result["budget_s"] = budget_s
    result["peak_rss_mib"] = float("nan")  # the high-water mark of this process says nothing per job
    if result.get("status") == "error":
        print(f"    error: {result.get('error')}", file=log, flush=True)
    return result


def torch_params_for(spec: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The torch methods' settings on one data set: the run's, then the size's overrides.

    An explicit ``--epochs`` wins over a size's override.
    """
    params = dict(args.torch_params)
    for key, value in getattr(spec, "torch", {}).items():
        if not (key == "max_epochs" and args.epochs is not None):
            params[key] = value
    return params


def method_params(method: str, args: argparse.Namespace, spec: Any = None) -> dict[str, Any]:
    torch_params = torch_params_for(spec, args) if spec is not None else dict(args.torch_params)
    if method in HC_METHODS:
        params = dict(torch_params)
        params.update(getattr(spec, "hc", {}) or {})
        params.update(args.hc_params)
        return params
    if method == "flat-torch":
        # Same optimiser settings and module as the classifier.
        params = {k: v for k, v in torch_params.items() if k in ("max_epochs", "lr", "batch_size")}
        if "random_state" in torch_params:
            params["seed"] = torch_params["random_state"]
        module_params = {k[len("module__"):]: v for k, v in torch_params.items() if k.startswith("module__")}
        if module_params:
            params["module_params"] = module_params
        return params
    if method in HICLASS_METHODS:
        return {"n_jobs": args.threads} if method != "hiclass-flat" else {}
    return {}


# ---------------------------------------------------------------------------- reporting
def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return "–"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.{digits}f}" if digits else f"{value:.0f}"
    return str(value)


def markdown_table(report: dict[str, Any]) -> str:
    lines = [
        ("| data set | nodes | levels | train / test | method | fit s | predict s | peak RSS MiB "
         "| RSS growth MiB | hF1 (micro) | exact-path acc. | mistake severity | load before, after |"),
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for ds in report["datasets"]:
        desc = ds["description"]
        for r in ds["results"]:
            status = r["status"]
            name = METHOD_NAMES.get(r["method"], r["method"]) + (" †" if r.get("cached") else "")
            head = (f"| {ds['name']} | {desc.get('n_nodes', '–'):,} | {desc.get('n_levels', '–')} | "
                    f"{desc.get('n_train', 0):,} / {desc.get('n_test', 0):,} | {name} |")
            if status == "ok":
                growth = r.get("peak_rss_mib", np.nan) - r.get("rss_before_mib", np.nan)
                lines.append(
                    f"{head} {_fmt(r['fit_s'], 2)} | {_fmt(r['predict_s'], 2)} | {_fmt(r.get('peak_rss_mib'), 0)} "
                    f"| {_fmt(growth, 0)} | {r['hf1']:.3f} | {r['exact']:.3f} | {r['severity']:.2f} "
                    f"| {_fmt(r.get('load_before'), 1)}, {_fmt(r.get('load_after'), 1)} |"
                )
            else:
                if status == "timeout":
                    what = f"time-out (> {r['budget_s']:.0f} s)"
                elif status == "skipped":
                    what = f"skipped: {r.get('reason', '')}"
                else:
                    what = f"error: {str(r.get('error', ''))[:80]}"
                lines.append(f"{head} {what} | | | | | | | |")
    return "\n".join(lines) + "\n"


def overhead_table(report: dict[str, Any]) -> str:
    rows = [ds for ds in report["datasets"] if ds.get("overhead", {}).get("status") == "ok"]
    if not rows:
        return ""
    lines = [
        "| data set | nodes | batches | flat CE epoch s | tree loss (level) epoch s | ratio | "
        "tree loss (sibling) epoch s | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for ds in rows:
        o = ds["overhead"]
        lines.append(
            f"| {ds['name']} | {ds['description']['n_nodes']:,} | {o.get('n_batches', '–')} | "
            f"{_fmt(o.get('flat_s'), 3)} | {_fmt(o.get('level_s'), 3)} | {_fmt(o.get('level_ratio'), 2)} | "
            f"{_fmt(o.get('sibling_s'), 3)} | {_fmt(o.get('sibling_ratio'), 2)} |"
        )
    return "\n".join(lines) + "\n"


def check_targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets, each with the figures that decide it."""
    checks = []
    for ds in report["datasets"]:
        by = {r["method"]: r for r in ds["results"]}
        n_nodes = ds["description"].get("n_nodes", 0)
        flat = by.get("flat-torch")
        lcppn = by.get("hiclass-lcppn")
        for hc in HC_METHODS:
            r = by.get(hc)
            if not r or r["status"] not in ("ok", "timeout"):
                continue
            ok = r["status"] == "ok"
            if flat and flat["status"] == "ok":
                checks.append({
                    "data set": ds["name"], "method": hc, "target": "hF1 >= flat baseline",
                    "met": ok and r["hf1"] >= flat["hf1"],
                    "figures": f"{r.get('hf1', float('nan')):.3f} vs {flat['hf1']:.3f}",
                })
            if ds["kind"] == "synthetic" and n_nodes >= 9_000 and lcppn:
                if lcppn["status"] == "ok":
                    for what, unit in (("fit", ".1f"), ("predict", ".2f")):
                        mine, theirs = r.get(f"{what}_s", float("nan")), lcppn[f"{what}_s"]
                        checks.append({
                            "data set": ds["name"], "method": hc, "target": f"{what} <= 0.5x LCPPN",
                            "met": ok and 2 * mine <= theirs,
                            "figures": f"x{mine / theirs:.2f} ({mine:{unit}} s vs {theirs:{unit}} s)",
                        })
                    checks.append({
                        "data set": ds["name"], "method": hc, "target": "hF1 >= LCPPN",
                        "met": ok and r["hf1"] >= lcppn["hf1"],
                        "figures": f"{r.get('hf1', float('nan')):.3f} vs {lcppn['hf1']:.3f}",
                    })
                elif lcppn["status"] == "timeout":
                    checks.append({
                        "data set": ds["name"], "method": hc, "target": "fit <= 0.5x LCPPN",
                        "met": ok and 2 * r["fit_s"] < lcppn["budget_s"],
                        "figures": f"{r.get('fit_s', float('nan')):.1f} s vs LCPPN time-out (> {lcppn['budget_s']:.0f} s)",
                    })
                    for target in ("predict <= 0.5x LCPPN", "hF1 >= LCPPN"):
                        checks.append({"data set": ds["name"], "method": hc, "target": target, "met": None,
                                       "figures": "LCPPN timed out: no figure to compare"})
                elif lcppn["status"] == "skipped":
                    for target in ("fit <= 0.5x LCPPN", "predict <= 0.5x LCPPN", "hF1 >= LCPPN"):
                        checks.append({"data set": ds["name"], "method": hc, "target": target,
                                       "met": ok if target.startswith("fit") else None,
                                       "figures": f"LCPPN {lcppn.get('reason', 'skipped')}"})
            if ds["kind"] == "synthetic" and n_nodes >= 90_000:
                total = r.get("fit_s", np.inf) + r.get("predict_s", 0)
                checks.append({
                    "data set": ds["name"], "method": hc, "target": "completes in < 10 min",
                    "met": ok and total < 600, "figures": f"fit + predict {total:.0f} s",
                })
        o = ds.get("overhead", {})
        if o.get("status") == "ok":
            for part in ("level", "sibling"):
                if f"{part}_ratio" in o:
                    checks.append({
                        "data set": ds["name"], "method": f"hc-{part}", "target": "tree loss epoch <= 1.3x flat CE",
                        "met": o[f"{part}_ratio"] <= 1.3, "figures": f"x{o[f'{part}_ratio']:.2f}",
                    })
    return checks


def targets_table(checks: list[dict[str, Any]]) -> str:
    if not checks:
        return ""
    lines = ["| data set | method | target | met | figures |", "| --- | --- | --- | --- | --- |"]
    for c in checks:
        lines.append(f"| {c['data set']} | {c['method']} | {c['target']} | {'n/a' if c['met'] is None else 'yes' if c['met'] else '**no**'} | {c['figures']} |")
    return "\n".join(lines) + "\n"


def _epochs(ds: dict[str, Any], settings: dict[str, Any]) -> Any:
    """The torch methods' epochs on one data set: ``--epochs`` if given, else the size's own, else the run's."""
    if settings.get("epochs") is not None:
        return settings["epochs"]
    return ds["spec"].get("torch", {}).get("max_epochs", settings["torch_params"].get("max_epochs"))


def write_markdown(report: dict[str, Any], path: Path) -> None:
    env = report["environment"]
    parts = [
        "<!-- written by python -m benchmarks.bench_peers; do not edit by hand -->",
        f"Run {report['started']} on {env['machine']} ({env['cpus']} CPUs), Python {env['python']}, "
        f"torch {env.get('torch')} ({env.get('threads')} threads), scikit-learn {env.get('sklearn')}, "
        f"HiClass {env.get('hiclass') or 'not installed'}; budget per fit + predict "
        f"{report['settings']['budget_s']:.0f} s (HiClass; {json.dumps(report['settings'].get('method_budgets', {}))}), "
        f"{report['settings']['budget_torch_s']:.0f} s (torch); total {report.get('total_s', 0) / 60:.1f} min"
        + (f" over {len(report['merged_from'])} runs merged" if report.get("merged_from") else "") + ".",
        "",
        f"HierarchicalClassifier and flat baseline settings: `{json.dumps(report['settings']['torch_params'])}`"
        + (f", classifier only: `{json.dumps(report['settings']['hc_params'])}`" if report["settings"]["hc_params"] else "")
        + ".",
        "",
        markdown_table(report),
        "Torch settings per data set (every HierarchicalClassifier and the flat baseline): "
        + "; ".join(
            f"{ds['name']}: {_epochs(ds, report['settings'])} epochs"
            + (f", classifier {json.dumps(ds['spec']['hc'])}" if ds["spec"].get("hc") else "")
            for ds in report["datasets"]
        )
        + ". † a result reused (`--resume`) from an earlier run with identical settings and data.",
        "",
    ]
    ov = overhead_table(report)
    if ov:
        parts += ["One training epoch on the same module and batches, criterion only changed:", "", ov]
    tg = targets_table(report.get("targets", []))
    if tg:
        parts += ["Targets:", "", tg]
    path.write_text("\n".join(parts))


def plot(report: dict[str, Any], path: Path) -> bool:
    """Fit time, predict time and hF1 against the number of nodes (synthetic data)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    syn = [ds for ds in report["datasets"] if ds["kind"] == "synthetic"]
    if not syn:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    markers = dict(zip(ALL_METHODS, "*os^DvxP"))
    for method in ALL_METHODS:
        pts = {"fit_s": [], "predict_s": [], "hf1": []}
        outs = []
        for ds in syn:
            n = ds["description"]["n_nodes"]
            for r in ds["results"]:
                if r["method"] != method:
                    continue
                if r["status"] == "ok":
                    for key in pts:
                        pts[key].append((n, r[key]))
                elif r["status"] == "timeout":
                    outs.append((n, r["budget_s"]))
        if not any(pts.values()) and not outs:
            continue
        label = METHOD_NAMES[method]
        for ax, key in zip(axes, ("fit_s", "predict_s", "hf1")):
            if pts[key]:
                xs, ys = zip(*pts[key])
                line, = ax.plot(xs, ys, marker=markers[method], label=label)
                color = line.get_color()
            else:
                color = None
            if key == "fit_s" and outs:
                xs, ys = zip(*outs)
                ax.scatter(xs, ys, marker="$T$", s=80, color=color or "k",
                           label=f"{label}: time-out" if not pts[key] else None)
    titles = {"fit_s": "fit seconds (T: time-out at budget)", "predict_s": "predict seconds", "hf1": "hierarchical F1 (micro)"}
    for ax, key in zip(axes, ("fit_s", "predict_s", "hf1")):
        ax.set_xscale("log")
        if key != "hf1":
            ax.set_yscale("log")
        ax.set_xlabel("nodes in the tree")
        ax.set_title(titles[key])
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("hiclass_parallel vs HiClass vs flat baseline (synthetic trees, CPU, "
                 f"{report['environment']['cpus']} cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def environment(threads: int) -> dict[str, Any]:
    env = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
           "threads": threads, "platform": platform.platform(),
           "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", OMP_WAIT_POLICY),
           "load_average_at_start": os.getloadavg()[0]}
    for mod, key in (("torch", "torch"), ("sklearn", "sklearn"), ("numpy", "numpy"), ("skorch", "skorch")):
        try:
            env[key] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            env[key] = None
    try:
        from importlib.metadata import version

        env["hiclass"] = version("hiclass")
    except Exception:  # noqa: BLE001
        env["hiclass"] = None
    return env


# ---------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_peers", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a tiny synthetic tree, a few epochs, no WordNet: seconds (what the tests run)")
    p.add_argument("--sizes", default=None,
                   help=f"synthetic sizes, comma separated, from {list(SYNTHETIC)} or N for about N nodes "
                        "(default: all; 'none' for none)")
    p.add_argument("--n-train", type=int, default=None, help="training rows for every synthetic size")
    p.add_argument("--n-test", type=int, default=None, help="test rows for every synthetic size")
    p.add_argument("--wordnet", default=None,
                   help=f"WordNet subtrees, comma separated, from {list(WORDNET)} or a synset name "
                        "(default: all, 'none' in --quick; skipped with a reason if the data is missing)")
    # hiclass-lcppn-svc is the many-rows peer of bench_text; the sweep's HiClass models use LR
    p.add_argument("--methods", default=",".join(m for m in ALL_METHODS if m != "hiclass-lcppn-svc"),
                   help=f"comma separated, from {ALL_METHODS}")
    p.add_argument("--budget", type=float, default=300.0,
                   help="seconds per fit + predict for the HiClass peers (default 300)")
    p.add_argument("--budget-torch", type=float, default=600.0,
                   help="seconds per fit + predict for the torch methods: the classifier and the flat "
                        "baseline (default 600, the 10-minute target at 100,000 nodes)")
    p.add_argument("--method-budget", action="append", default=[], metavar="METHOD=SECONDS",
                   help=f"budget of one method (default {METHOD_BUDGETS})")
    p.add_argument("--grace", type=float, default=30.0,
                   help="extra seconds for a worker to start and load its data (default 30)")
    p.add_argument("--no-skip-after-timeout", action="store_true",
                   help="try a method again on larger data after it timed out on smaller data")
    p.add_argument("--no-overhead", action="store_true", help="skip the one-epoch criterion overhead measurement")
    p.add_argument("--epochs", type=int, default=None, help="max_epochs of the classifier and the flat baseline")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--torch-param", action="append", default=[], metavar="NAME=VALUE",
                   help="extra HierarchicalClassifier parameter shared with the flat baseline "
                        "(module__* go to its module too); JSON values, e.g. module__hidden=256")
    p.add_argument("--hc-param", action="append", default=[], metavar="NAME=VALUE",
                   help="extra HierarchicalClassifier-only parameter (JSON value)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads and HiClass n_jobs (default: all CPUs; 1 with --quick, whose "
                        "tiny batches gain nothing from threads and lose much to spinning ones on a busy CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--workdir", type=Path, default=None,
                   help="scratch folder for data and worker outputs (default: a folder under the temp dir)")
    p.add_argument("--in-process", action="store_true",
                   help="run the jobs in this process: faster start, but no time-out and no peak memory")
    p.add_argument("--resume", action="store_true",
                   help="reuse finished jobs in --workdir whose settings are unchanged")
    p.add_argument("--name", default="bench_peers", help="base name of the output files")
    p.add_argument("--merge", nargs="+", type=Path, default=None, metavar="REPORT.json",
                   help="run nothing: merge earlier reports into the outputs in --out (on a data set "
                        "of the same name, a later report's results replace the same methods')")
    args = p.parse_args(argv)

    def kv(items: list[str]) -> dict[str, Any]:
        out = {}
        for item in items:
            name, _, value = item.partition("=")
            try:
                out[name] = json.loads(value)
            except json.JSONDecodeError:
                out[name] = value
        return out

    if args.threads is None:
        args.threads = 1 if args.quick else (os.cpu_count() or 1)
    args.torch_params = dict(QUICK_TORCH_PARAMS if args.quick else TORCH_PARAMS)
    for key, value in (("max_epochs", args.epochs), ("lr", args.lr), ("batch_size", args.batch_size)):
        if value is not None:
            args.torch_params[key] = value
    args.torch_params.update(kv(args.torch_param))
    args.hc_params = kv(args.hc_param)
    args.method_budgets = dict(METHOD_BUDGETS)
    args.method_budgets.update({k: float(v) for k, v in kv(args.method_budget).items()})
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in args.methods if m not in ALL_METHODS]
    if bad:
        p.error(f"unknown methods {bad}; choose from {list(ALL_METHODS)}")
    return args


def dataset_specs(args: argparse.Namespace) -> list[Any]:
    specs: list[Any] = []
    if args.quick and args.sizes is None:
        specs += list(QUICK_SYNTHETIC.values())
    elif args.sizes != "none":
        for size in (args.sizes or ",".join(SYNTHETIC)).split(","):
            size = size.strip()
            if size in SYNTHETIC:
                spec = SYNTHETIC[size]
            elif size in QUICK_SYNTHETIC:
                spec = QUICK_SYNTHETIC[size]
            else:
                n = int(size)
                spec = SyntheticSpec(f"syn-{n}", n, max(8 * n, 2000), max(2 * n, 500))
            specs.append(spec)
    for spec in specs:
        if args.n_train:
            spec.n_train = args.n_train
        if args.n_test:
            spec.n_test = args.n_test
    wordnet = args.wordnet if args.wordnet is not None else ("none" if args.quick else ",".join(WORDNET))
    if wordnet != "none":
        for item in wordnet.split(","):
            item = item.strip()
            specs.append(WORDNET[item] if item in WORDNET else WordNetSpec(f"wn-{item.split('.')[0]}", item))
    return specs


def merge_reports(paths: list[Path], args: argparse.Namespace) -> dict[str, Any]:
    """One report from several runs (e.g. the synthetic and the WordNet parts run apart)."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    merged = dict(reports[0])
    by_name: dict[str, Any] = {}
    for rep in reports:
        for ds in rep["datasets"]:
            if ds["name"] not in by_name:
                by_name[ds["name"]] = ds
                continue
            # A later run's results replace the same methods' results; the rest are kept.
            old = by_name[ds["name"]]
            later = {r["method"]: r for r in ds["results"]}
            kept = [later.pop(r["method"]) if r["method"] in later else r for r in old["results"]]
            old["results"] = kept + list(later.values())
            if ds.get("overhead"):
                old["overhead"] = ds["overhead"]
            if ds.get("description"):
                old["description"] = ds["description"]
    merged["datasets"] = list(by_name.values())
    merged["total_s"] = sum(r.get("total_s", 0) for r in reports)
    merged["merged_from"] = [{"started": r["started"], "total_s": r.get("total_s"),
                              "datasets": [d["name"] for d in r["datasets"]]} for r in reports]
    merged["targets"] = check_targets(merged)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(merged, indent=2, default=float))
    write_markdown(merged, args.out / f"{args.name}.md")
    plot(merged, args.out / f"{args.name}.png")
    return merged


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.merge:
        return merge_reports(args.merge, args)
    log = sys.stdout
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    t0 = time.perf_counter()
    workdir = args.workdir or Path(tempfile.gettempdir()) / f"hiclass_parallel_{args.name}{'_quick' if args.quick else ''}"
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "started": started,
        "environment": environment(args.threads),
        "settings": {"budget_s": args.budget, "budget_torch_s": args.budget_torch,
                     "method_budgets": args.method_budgets, "grace_s": args.grace, "torch_params": args.torch_params,
                     "hc_params": args.hc_params, "methods": args.methods, "seed": args.seed,
                     "quick": args.quick, "generator": GENERATOR, "epochs": args.epochs},
        "datasets": [],
    }
    timed_out: dict[str, str] = {}
    for spec in dataset_specs(args):
        print(f"== {spec.name}", file=log, flush=True)
        entry: dict[str, Any] = {"name": spec.name, "kind": spec.kind, "spec": asdict(spec), "results": []}
        report["datasets"].append(entry)
        data_dir = workdir / "data" / spec.name
        try:
            t = time.perf_counter()
            data = make_synthetic(spec, args.seed) if spec.kind == "synthetic" else make_wordnet(spec, args.seed)
            entry["description"] = save_split(data, data_dir)
            entry["description"]["make_s"] = time.perf_counter() - t
        except Exception as exc:  # noqa: BLE001 - a missing data set skips its rows, with the reason
            entry["description"] = {}
            entry["skipped"] = f"{type(exc).__name__}: {exc}"
            print(f"   skipped: {entry['skipped']}", file=log, flush=True)
            continue
        tree = data["tree"]
        y_test = np.asarray(data["y_test"])
        del data
        print(f"   {json.dumps(entry['description'])}", file=log, flush=True)
        for method in args.methods:
            reason = unavailable_reason(method)
            if reason is None and method in timed_out and not args.no_skip_after_timeout and spec.kind == "synthetic":
                reason = f"timed out on {timed_out[method]}"
            if reason is not None:
                entry["results"].append({"method": method, "status": "skipped", "reason": reason})
                print(f"   {method:14s} skipped: {reason}", file=log, flush=True)
                continue
            job = {"method": method, "params": method_params(method, args, spec), "data": str(data_dir),
                   "threads": args.threads, "spec": _spec_key(spec), "seed": args.seed,
                   "out": str(workdir / "runs" / spec.name / method)}
            key = _job_key(job)
            cached = Path(job["out"]) / "final.json"
            result = None
            budget = method_budget(method, args)
            if args.resume and cached.exists():
                old = json.loads(cached.read_text())
                # A time-out counts again only if the budget has not grown since.
                if old.get("key") == key and (old.get("status") == "ok" or (
                        old.get("status") == "timeout" and old.get("budget_s", 0) >= budget)):
                    result = old
                    result["cached"] = True
            if result is None:
                runner = run_in_process if args.in_process else run_worker
                result = runner(job, budget, args.grace, log)
                if result["status"] == "ok":
                    pred = np.load(Path(job["out"]) / "pred.npy")
                    try:
                        result.update(score(tree, y_test, pred))
                    except Exception as exc:  # noqa: BLE001 - e.g. an invalid path: report, go on
                        result["status"] = "error"
                        result["error"] = f"scoring failed: {type(exc).__name__}: {exc}"
                result["key"] = key
                result.pop("traceback", None) if result["status"] != "error" else None
                cached.write_text(json.dumps(result, indent=2, default=float))
            if result["status"] == "timeout":
                timed_out.setdefault(method, spec.name)
            entry["results"].append(result)
            if result["status"] == "ok":
                print(f"   {method:14s} fit {result['fit_s']:8.2f} s  predict {result['predict_s']:7.2f} s  "
                      f"peak {result.get('peak_rss_mib', float('nan')):7.0f} MiB  hF1 {result['hf1']:.3f}  exact {result['exact']:.3f}  "
                      f"severity {result['severity']:.2f}", file=log, flush=True)
            else:
                print(f"   {method:14s} {result['status']} {result.get('error', '')[:300]}", file=log, flush=True)
            _write_outputs(report, args, t0)  # after every job: a stopped run keeps what it measured
        if not args.no_overhead and any(m in args.methods for m in TORCH_METHODS) and unavailable_reason("hc-level") is None:
            entry["overhead"] = run_overhead(args, spec, data_dir, workdir)
        _write_outputs(report, args, t0)
    _write_outputs(report, args, t0)
    print(f"== done in {(time.perf_counter() - t0) / 60:.1f} min; outputs in {args.out}", file=log, flush=True)
    return report


def method_budget(method: str, args: argparse.Namespace) -> float:
    if method in args.method_budgets:
        return args.method_budgets[method]
    return args.budget_torch if method in TORCH_METHODS else args.budget


def run_overhead(args: argparse.Namespace, spec: Any, data_dir: Path, workdir: Path) -> dict[str, Any]:
    torch_params = torch_params_for(spec, args)
    params = {k: v for k, v in torch_params.items() if k in ("lr", "batch_size")}
    params["module_params"] = {k[len("module__"):]: v for k, v in torch_params.items() if k.startswith("module__")}
    # Enough steps for a stable per-step time, few enough that the largest tree takes minutes.
    n_nodes = int(np.load(data_dir / "parents.npy").size)
    params["max_batches"] = 20 if args.quick else 100 if n_nodes <= 2_000 else 30 if n_nodes <= 20_000 else 6
    params["repeats"] = 3 if n_nodes <= 20_000 else 2
    job = {"method": "epoch-overhead", "params": params, "data": str(data_dir), "threads": args.threads,
           "spec": _spec_key(spec), "seed": args.seed, "out": str(workdir / "runs" / spec.name / "epoch-overhead")}
    key = _job_key(job)
    cached = Path(job["out"]) / "final.json"
    if args.resume and cached.exists():
        old = json.loads(cached.read_text())
        if old.get("key") == key and old.get("status") == "ok":
            old["cached"] = True
            return old
    runner = run_in_process if args.in_process else run_worker
    result = runner(job, args.budget_torch, args.grace, sys.stdout)
    result["key"] = key
    result.pop("traceback", None)
    cached.write_text(json.dumps(result, indent=2, default=float))
    if result["status"] == "ok":
        print(f"   epoch overhead: flat {result['flat_s']:.3f} s, level x{result.get('level_ratio', float('nan')):.2f}, "
              f"sibling x{result.get('sibling_ratio', float('nan')):.2f} ({result['n_batches']} batches)", flush=True)
    else:
        print(f"   epoch overhead: {result['status']} {result.get('error', '')[:300]}", flush=True)
    return result


def _write_outputs(report: dict[str, Any], args: argparse.Namespace, t0: float) -> None:
    report["total_s"] = time.perf_counter() - t0
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    report["targets"] = check_targets(report)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=2, default=float))
    write_markdown(report, args.out / f"{args.name}.md")
    plot(report, args.out / f"{args.name}.png")


if __name__ == "__main__":
    main()
