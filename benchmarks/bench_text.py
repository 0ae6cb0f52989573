"""Real text at scale, side by side: WordNet hypernym placement from glosses on a CPU.

What a user with text and a big taxonomy would compare: for each subset of
WordNet's nouns, glosses with lemma names (``load_wordnet_glosses(root, include_lemmas=True)``)
are split 80/20 and encoded once by one ``TfidfVectorizer(sublinear_tf=True,
ngram_range=(1, 2))``; every method then fits on the same sparse features, in its own fresh
process (``benchmarks._worker``: fit and predict times, peak RSS of the process tree), and
is scored by the same functions:

- ``hc-text``: ``HierarchicalClassifier(tree, semantics="terminal")``, nothing else set;
- ``hc-text-tuned``: the same with the settings in ``TUNED`` (or ``--tuned``);
- ``hc-text-classtext``: the defaults plus ``module__class_features``: the lemma names of
  every class (and of each internal node's stop column), TF-IDF encoded like ``X``, except
  the classes whose synset is a held-out row (they stand for the new items, which a real
  taxonomy would not hold yet);
- ``linear-svc``, ``sgd``: flat scikit-learn linear models with their defaults;
- ``xr-linear``: libpecos XR-Linear, a label-tree XMC model (own environment, ``PECOS_PYTHON``);
- ``hiclass-lcppn``: HiClass's local classifier per parent node, within its budget;
  ``hiclass-lcppn-svc`` the same with ``LinearSVC`` local classifiers.

Reported per method: fit s, predict s, peak RSS, hierarchical F1 (micro), exact accuracy
(predicted node == true node), hF1 on the held-out rows whose target never occurs as a
training target ("unseen"), and the load average. Ratios are taken within one run.

Usage::

    PECOS_PYTHON=/path/to/pecos-venv/bin/python python -m benchmarks.bench_text \\
        --subsets animal,person,artifact,nouns --out benchmarks/results/bench_text.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._text_methods import TEXT_METHODS
from benchmarks._text_methods import unavailable_reason as text_unavailable
from benchmarks.bench_peers import environment, run_worker, save_split, score

SUBSETS = {"animal": "animal.n.01", "person": "person.n.01", "artifact": "artifact.n.01", "nouns": None,
           "dog": "dog.n.01",  # dog: 188 synsets, for the plumbing test
           # Small taxonomies (hundreds of classes, a few hundred rows), where flat LinearSVC competes.
           "vehicle": "vehicle.n.01", "fish": "fish.n.01", "bird": "bird.n.01", "mammal": "mammal.n.01",
           # Subtrees no default was tuned on: checks of a change to the defaults.
           "plant": "plant.n.02", "act": "act.n.02",
           # ... and two more, held out until the choice was made.
           "communication": "communication.n.02", "state": "state.n.02"}
#: Many rows per class: every noun's gloss labelled with its ancestor at depth 4 or 5 (itself
#: when it is shallower), the tree cut to the targets' paths: about 850 or 2,400 target classes
#: with a mean of about 96 or 34 rows each (a median of 6 or 4: a few classes hold most rows),
#: HiClass's home regime.
CUTS = {"nouns-depth4": 4, "nouns-depth5": 5}
SUBSETS.update({name: None for name in CUTS})
METHODS = ("hc-text", "hc-text-tuned", "hc-text-classtext", "linear-svc", "sgd", "xr-linear", "hiclass-lcppn",
           "hiclass-lcppn-svc")
#: hc-text-tuned: the defaults, decoded for hierarchical F1 instead of the most probable answer.
TUNED: dict[str, Any] = {"decoding": "hf1", "top_k": 10}
#: A flat linear model stores n_targets x n_features float64 weights: beyond this it is not run.
FLAT_LIMIT_BYTES = 8 * 2**30
BUDGETS = {"hiclass-lcppn": 300.0, "hiclass-lcppn-svc": 900.0}


def cut_to_depth(tree: Any, ids: np.ndarray, own: np.ndarray, depth: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """Targets cut to their ancestor at ``depth`` and the tree cut to the targets' paths
    (re-indexed); a row's own synset becomes -1 where the cut tree does not hold it."""
    from hiclass_parallel.tree import Tree

    paths = np.asarray(tree.paths)
    cut = np.where(np.asarray(tree.depth)[ids] > depth, paths[ids, depth], ids)
    keep = np.unique(paths[np.unique(cut)])
    keep = keep[keep >= 0]
    new_id = np.full(tree.n_classes, -1, dtype=np.int64)
    new_id[keep] = np.arange(keep.size)
    parents = np.asarray(tree.parents)[keep]
    cut_tree = Tree.from_parents(np.where(parents >= 0, new_id[np.maximum(parents, 0)], -1),
                                 labels=np.asarray(tree.labels)[keep].tolist())
    return cut_tree, new_id[cut], new_id[own]


def make_text(root: str | None, seed: int = 0, pos: str | None = "n", cut_depth: int | None = None) -> dict[str, Any]:
    """The gloss data set under ``root`` (``None``: every synset of ``pos``), split and TF-IDF
    encoded; with ``cut_depth``, targets cut to that depth (:func:`cut_to_depth`)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import train_test_split

    from hiclass_parallel.datasets import load_wordnet_glosses

    data = load_wordnet_glosses(root, pos=pos, include_lemmas=True)
    ids = data.tree.to_ids(data.target)
    own = data.tree.to_ids(data.synsets)
    if cut_depth is not None:
        tree, ids, own = cut_to_depth(data.tree, ids, own, cut_depth)
        data = type(data)(**{**data, "tree": tree})
    # The split depends only on the number of rows and the seed: the same with or without `own`.
    t_train, t_test, y_train, y_test, own_train, own_test = train_test_split(data.data, ids, own, test_size=0.2,
                                                                             random_state=seed)
    vec = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32)
    X_train = vec.fit_transform(t_train).tocsr()
    # Class text (hc-text-classtext): a class's lemma names ("person, individual, someone"),
    # for the classes that are no held-out row's synset (a root has no row: its name is its label's).
    names = [""] * data.tree.n_classes
    for node, text in zip(own_train, t_train):
        if node >= 0:
            names[node] = text.split(": ", 1)[0]
    for root_id in np.flatnonzero(np.asarray(data.tree.parents) < 0):
        names[root_id] = str(data.tree.labels[root_id]).split(".")[0].replace("_", " ")
    return {"X_train": X_train, "X_test": vec.transform(t_test).tocsr(),
            "y_train": np.asarray(y_train), "y_test": np.asarray(y_test), "tree": data.tree,
            "own_test": np.asarray(own_test),  # each held-out row's own synset
            # one row per class: the classifier gives each stop column its node's row
            "class_features": vec.transform(names).tocsr()}


def score_text(tree: Any, y_train: np.ndarray, y_test: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """``bench_peers.score`` plus hF1 on the rows whose target is unseen in training."""
    from hiclass_parallel.metrics import hierarchical_f1_score

    out = score(tree, y_test, pred)
    unseen = ~np.isin(y_test, y_train)
    true = np.asarray(tree.paths, dtype=np.int64)[y_test[unseen]]
    out["hf1_unseen"] = float(hierarchical_f1_score(true, pred[unseen], tree, input_type="ids")) if unseen.any() else float("nan")
    out["unseen_fraction"] = float(unseen.mean())
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks._peers import unavailable_reason

    report: dict[str, Any] = {"environment": environment(args.threads), "tuned_settings": args.tuned, "subsets": {}}
    work = Path(args.work)
    for name in args.subsets:
        start = time.perf_counter()
        data = make_text(SUBSETS[name], args.seed, cut_depth=CUTS.get(name))
        info = save_split(data, work / name)
        scipy.sparse.save_npz(work / name / "class_features.npz", data["class_features"])
        info["encode_s"] = time.perf_counter() - start
        print(f"{name}: {info['n_nodes']} classes, {info['n_train']} train rows, {info['n_features']} features",
              flush=True)
        results = {}
        for method in args.methods:
            reason = text_unavailable(method) if method in TEXT_METHODS else unavailable_reason(method)
            flat_bytes = 8 * info["classes_seen_in_train"] * info["n_features"]
            if method in ("linear-svc", "sgd") and flat_bytes > FLAT_LIMIT_BYTES:
                reason = (f"cannot run here: {info['classes_seen_in_train']:,} x {info['n_features']:,} float64 "
                          f"weights = {flat_bytes / 2**30:.0f} GiB (24 GiB machine)")
            elif method.startswith("hiclass-lcppn") and name not in args.hiclass_on:
                reason = f"not run on {name}: over its budget on the smaller subsets (see docs/performance.md)"
            if reason:
                results[method] = {"status": "skipped", "reason": reason}
                print(f"  {method}: skipped ({reason})", flush=True)
                continue
            params = dict(args.tuned) if method == "hc-text-tuned" else {}
            if method == "hc-text-classtext":
                params["class_features_path"] = str(work / name / "class_features.npz")
            if method.startswith("hc-"):
                params.setdefault("random_state", args.seed)
                params.setdefault("device", args.device)
            job = {"method": method, "data": str(work / name), "out": str(work / name / method), "params": params,
                   "threads": args.threads}
            result = run_worker(job, BUDGETS.get(method, args.budget), 60.0, sys.stdout)
            if result.get("status") == "ok":
                # The sampled peak of the worker's process tree (see _worker.peak_rss_mib on
                # why ru_maxrss is not used) and its own VmHWM, whichever is larger.
                result["peak_rss_mib"] = max(result.get("peak_rss_tree_mib", 0.0), result.get("peak_rss_self_mib", 0.0))
                pred = np.load(work / name / method / "pred.npy")
                result.update(score_text(data["tree"], data["y_train"], data["y_test"], pred))
                for key in ("fit_s", "predict_s"):
                    if f"inner_{key}_" in result:  # external process: its own timing, without start-up
                        result[f"{key}_with_startup"], result[key] = result[key], result[f"inner_{key}_"]
            results[method] = result
            print(f"  {method}: {_summary(result)}", flush=True)
        report["subsets"][name] = {"info": info, "results": results, "load_average_end": os.getloadavg()[0]}
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1, default=float))
    return report


def _summary(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"{r.get('status')} {r.get('error', '')[:200]}"
    return (f"fit {r['fit_s']:.1f}s predict {r['predict_s']:.1f}s RSS {r['peak_rss_mib']:.0f}MiB "
            f"hF1 {r['hf1']:.3f} exact {r['exact']:.3f} unseen {r['hf1_unseen']:.3f} load {r.get('load_after', 0):.1f}")


def markdown(report: dict[str, Any]) -> str:
    """One table per subset: every method, with ratios to LinearSVC measured in the same run."""
    lines = []
    for name, sub in report["subsets"].items():
        info, res = sub["info"], sub["results"]
        lines += [f"**{name}** ({info['n_nodes']:,} classes, {info['n_train']:,} train / {info['n_test']:,} test rows, "
                  f"{info['n_features']:,} features; load average at the end {sub['load_average_end']:.1f})", "",
                  "| method | fit s | predict s | peak RSS MiB | hF1 | exact | hF1 unseen | fit / LinearSVC |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        ref = res.get("linear-svc", {})
        for method, r in res.items():
            if r.get("status") != "ok":
                lines.append(f"| {method} | {r.get('status')}: {r.get('reason', r.get('error', ''))[:80]} | | | | | | |")
                continue
            ratio = f"{r['fit_s'] / ref['fit_s']:.2f}" if ref.get("status") == "ok" else ""
            lines.append(f"| {method} | {r['fit_s']:.1f} | {r['predict_s']:.1f} | {r['peak_rss_mib']:.0f} | "
                         f"{r['hf1']:.3f} | {r['exact']:.3f} | {r['hf1_unseen']:.3f} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> bool:
    """hF1 against fit time, one panel per subset, log time axis; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return False
    subsets = list(report["subsets"])
    fig, axes = plt.subplots(1, len(subsets), figsize=(4 * len(subsets), 3.6), squeeze=False)
    markers = dict(zip(METHODS, "osP^Dvx"))
    colors = dict(zip(METHODS, plt.get_cmap("tab10").colors))  # one colour per method in every panel
    for ax, name in zip(axes[0], subsets):
        for method, r in report["subsets"][name]["results"].items():
            if r.get("status") != "ok":
                continue
            ax.scatter(r["fit_s"], r["hf1"], marker=markers.get(method, "o"), color=colors.get(method), s=60)
        ax.set_xscale("log")
        # A panel spanning less than a decade gets labelled minor ticks that overlap: drop them.
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(name)
        ax.set_xlabel("fit seconds (log)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("hierarchical F1 (held out)")
    handles = [plt.Line2D([], [], marker=markers[m], color=colors[m], linestyle="", markersize=7) for m in METHODS]
    fig.legend(handles, METHODS, loc="lower center", ncol=len(METHODS), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_text", description=__doc__.split("\n\n")[0])
    p.add_argument("--subsets", default="animal,person,artifact,nouns")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--hiclass-on", default="animal", help="subsets on which HiClass LCPPN runs")
    p.add_argument("--tuned", type=json.loads, default=TUNED,
                   help="settings of hc-text-tuned as JSON, e.g. '{\"optimizer__second_moment\": \"entry\"}' "
                        f"(default: {json.dumps(TUNED)})")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="device of this package's classifier, e.g. cuda")
    p.add_argument("--budget", type=float, default=900.0, help="seconds per fit + predict")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default="/tmp/bench_text")
    p.add_argument("--out", default=None, help="JSON report path")
    p.add_argument("--markdown", default=None, help="write the tables here")
    p.add_argument("--plot", default=None, help="write the hF1-vs-fit-time plot here (PNG)")
    p.add_argument("--replot", default=None, help="only redraw tables and plot from this JSON report")
    args = p.parse_args(argv)
    args.subsets = [s for s in args.subsets.split(",") if s]
    args.methods = [m for m in args.methods.split(",") if m]
    args.hiclass_on = [s for s in args.hiclass_on.split(",") if s]
    bad = [s for s in args.subsets if s not in SUBSETS]
    if bad:
        p.error(f"unknown subsets {bad}; choose from {list(SUBSETS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = json.loads(Path(args.replot).read_text()) if args.replot else run(args)
    if args.plot:
        plot(report, Path(args.plot))
    table = markdown(report)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
