"""The text route end to end on a GPU: all nouns and the full 117,659-class WordNet tree.

For each task, WordNet glosses with lemma names are split 80/20 (seed 0) and TF-IDF encoded as
in :mod:`benchmarks.bench_text`; ``HierarchicalClassifier(tree, semantics="terminal",
device=...)`` trains with its defaults (``SparseMLP``, sibling partition, path-local training)
and predicts the held-out rows. Reported per task:

- fit seconds, twice (the first fit pays for CUDA kernels' first launches and Triton's
  compilation; the second is what a user's later fits cost), seconds per epoch;
- predict seconds of the default route, twice (on a GPU: batched exhaustive decoding, every
  class scored, :func:`best_paths`; on a CPU: the best-first search), and of the best-first
  search from the hidden rows on the same device, and whether the two give the same paths;
- hierarchical F1, exact accuracy (``bench_peers.score``);
- the host synchronisations of a training step and of a predicted batch, counted by
  ``torch.cuda.set_sync_debug_mode`` and grouped by the line of this package that caused them;
- optionally the same fit on the CPU with ``--cpu-threads`` threads, in the same run.

The full tree (``--tasks full``) places nouns and verbs by their glosses
(``load_wordnet_glosses(None, pos=None)``); adjectives and adverbs are classes without rows.

Usage::

    python -m benchmarks.bench_gpu_text --tasks nouns,full --out gpu-out/gpu_text.json
    python -m benchmarks.bench_gpu_text --device cpu --tasks person   # the same on a CPU
    python -m benchmarks.bench_gpu_text --device cpu --tasks person --params '{"batch_size": 512}'
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TASKS = {"nouns": (None, "n"), "full": (None, None), "person": ("person.n.01", "n"), "animal": ("animal.n.01", "n"),
         "artifact": ("artifact.n.01", "n"), "dog": ("dog.n.01", "n")}


def make_task(root: str | None, pos: str | None, seed: int = 0) -> dict[str, Any]:
    """:func:`benchmarks.bench_text.make_text`, with each held-out row's part of speech."""
    from benchmarks.bench_text import make_text

    data = make_text(root, seed, pos=pos)
    data["pos_test"] = np.array([str(data["tree"].labels[i]).split(".")[-2] for i in data["own_test"]])
    return data


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def count_syncs(fn: Any, device: str) -> dict[str, int]:
    """Host synchronisations inside ``fn()``, by the first line of this package on the stack."""
    import torch

    if not device.startswith("cuda"):
        return {}
    counts: collections.Counter[str] = collections.Counter()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
            _sync(device)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        if "synchroniz" in str(w.message):
            counts[f"{Path(w.filename).name}:{w.lineno}"] += 1
    return dict(counts.most_common())


def run_task(name: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from benchmarks.bench_peers import score
    from hiclass_parallel.estimators import HierarchicalClassifier

    start = time.perf_counter()
    data = make_task(*TASKS[name], seed=args.seed)
    tree = data["tree"]
    out: dict[str, Any] = {"n_classes": tree.n_classes, "n_levels": tree.n_levels, "n_train": data["X_train"].shape[0],
                           "n_test": data["X_test"].shape[0], "n_features": data["X_train"].shape[1],
                           "encode_s": time.perf_counter() - start}
    print(f"{name}: {out}", flush=True)
    devices = [args.device] + (["cpu"] if args.cpu_threads and args.device != "cpu" and name in args.cpu_on else [])
    for device in devices:
        res: dict[str, Any] = {}
        threads = torch.get_num_threads()
        if device == "cpu" and args.cpu_threads:
            torch.set_num_threads(args.cpu_threads)
        fits = []
        for repeat in range(1 if device == "cpu" else args.fits):
            clf = HierarchicalClassifier(tree, semantics="terminal", device=device, random_state=args.seed, verbose=0,
                                         **args.params)
            _sync(device)
            t0 = time.perf_counter()
            clf.fit(data["X_train"], tree.labels[data["y_train"]])
            _sync(device)
            fits.append(time.perf_counter() - t0)
            print(f"  {device} fit {repeat}: {fits[-1]:.2f} s, epochs {len(clf.net_.history)}", flush=True)
        res["fit_s"] = fits
        res["epochs"] = len(clf.net_.history)
        res["epoch_s"] = [float(d) for d in clf.net_.history[:, "dur"]]
        res["train_loss"] = [float(v) for v in clf.net_.history[:, "train_loss"]]
        res["step_engine"] = getattr(clf.net_, "step_engine_", None)
        predict_s = []
        for _ in range(2):  # the first predict pays for the decoding kernels' first launches
            _sync(device)
            t0 = time.perf_counter()
            pred = clf.predict(data["X_test"])
            _sync(device)
            predict_s.append(time.perf_counter() - t0)
        res["predict_s"] = predict_s
        if device == args.device and args.profile and device.startswith("cuda"):
            res["profile"] = profile_epoch(tree, data, device, args, name)
        from benchmarks._peers import ids_of_label_paths
        from hiclass_parallel.ops.decode import decoding_route

        res["decoding_route"] = decoding_route(clf.partition_, on_demand=clf.path_local_, device=device)
        paths = ids_of_label_paths(tree, pred, clf.pad_label_)
        res.update(score(tree, data["y_test"], paths))
        for pos in ("n", "v"):
            rows = data["pos_test"] == pos
            if rows.any() and not rows.all():
                res[f"hf1_{pos}"] = score(tree, data["y_test"][rows], paths[rows])["hf1"]
        print(f"  {device} predict ({res['decoding_route']}) {predict_s[0]:.2f} s, again {predict_s[1]:.2f} s, "
              f"hF1 {res['hf1']:.4f}, exact {res['exact']:.4f}", flush=True)
        if device == args.device and clf.path_local_:
            res.update(_other_route_and_syncs(clf, data, device, args.sync_steps))
            if device.startswith("cuda"):
                res["max_memory_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
                torch.cuda.reset_peak_memory_stats()
        torch.set_num_threads(threads)
        out["cpu" if device == "cpu" and device != args.device else "main"] = res
    return out


def profile_epoch(tree: Any, data: dict[str, Any], device: str, args: argparse.Namespace, name: str) -> str:
    """One more fit of one epoch under torch's profiler: where the device time goes, by kernel
    (the table is written to ``<profile>/<task>_profile.txt``; its path is returned)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from hiclass_parallel.estimators import HierarchicalClassifier

    clf = HierarchicalClassifier(tree, semantics="terminal", device=device, random_state=args.seed, verbose=0,
                                 **{**args.params, "max_epochs": 1})
    _sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        clf.fit(data["X_train"], tree.labels[data["y_train"]])
        _sync(device)
    path = Path(args.profile) / f"{name}_profile.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30)
    table_cpu = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    path.write_text(f"{name}: one epoch, config_.step_engine={clf.config_.step_engine!r}\n"
                    f"{clf.config_.step_engine_reason}\n\nby device time\n{table}\n\nby host time\n{table_cpu}\n")
    print(table, flush=True)
    return str(path)


def _other_route_and_syncs(clf: Any, data: dict[str, Any], device: str, sync_steps: int) -> dict[str, Any]:
    """The best-first search from the hidden rows on the same device, and the host syncs counted."""
    from hiclass_parallel.ops.best_first import best_first_paths

    tree, res = data["tree"], {}

    def search(hidden: Any) -> Any:
        return best_first_paths(clf.net_.module_.scorer(hidden), hidden.shape[0], tree, stop=clf.stop_,
                                semantics="terminal", like=hidden)

    _sync(device)
    t0 = time.perf_counter()
    searched, _ = clf._per_batch(data["X_test"], search, hidden=True)
    _sync(device)
    res["predict_best_first_s"] = time.perf_counter() - t0
    res["best_first_same_paths"] = float(np.mean(np.all(searched == clf._predict_ids(data["X_test"]), axis=1)))
    print(f"  best-first predict {res['predict_best_first_s']:.2f} s, same paths "
          f"{res['best_first_same_paths']:.4f}", flush=True)
    if sync_steps and device.startswith("cuda"):
        batch = clf.config_.batch_size  # the resolved size ("auto" is a setting, not a size)
        rows = slice(0, batch * sync_steps)
        X_few, y_few = data["X_train"][rows], tree.labels[data["y_train"][rows]]
        res["syncs_train"] = count_syncs(lambda: clf.partial_fit(X_few, y_few), device)
        res["syncs_train_steps"] = sync_steps
        X_pred = data["X_test"][:batch]
        res["syncs_predict_batch"] = count_syncs(lambda: clf.predict(X_pred), device)
        print(f"  syncs over {sync_steps} steps: {sum(res['syncs_train'].values())}, "
              f"per predicted batch: {sum(res['syncs_predict_batch'].values())}", flush=True)
    return res


def environment(device: str) -> dict[str, Any]:
    import platform

    import sklearn
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "scikit-learn": sklearn.__version__,
           "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(), "load_average": os.getloadavg(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    if device.startswith("cuda"):
        env.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
        try:
            import triton

            env["triton"] = triton.__version__
        except ImportError:
            env["triton"] = None
    return env


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_gpu_text", description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="nouns,full", help=f"comma-separated, of {sorted(TASKS)}")
    p.add_argument("--device", default="cuda")
    p.add_argument("--fits", type=int, default=2, help="fits per task on the device (the first pays for warm-up)")
    p.add_argument("--cpu-threads", type=int, default=0, help="also fit on the CPU with this many threads")
    p.add_argument("--cpu-on", default="person", help="tasks that also fit on the CPU (with --cpu-threads)")
    p.add_argument("--sync-steps", type=int, default=20, help="training steps whose host syncs are counted")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--params", type=json.loads, default={},
                   help='classifier parameters over the defaults, as JSON (e.g. \'{"batch_size": 512}\')')
    p.add_argument("--profile", default=None, help="also profile one epoch per task; tables go to this folder")
    p.add_argument("--out", default=None, help="JSON report path")
    args = p.parse_args(argv)
    args.cpu_on = args.cpu_on.split(",")
    import torch

    if args.device.startswith("cuda"):
        torch.zeros(1, device=args.device)  # the CUDA context, outside every timing
    report: dict[str, Any] = {"environment": environment(args.device), "params": args.params, "tasks": {}}
    for name in args.tasks.split(","):
        report["tasks"][name] = run_task(name, args)
        report["environment"]["load_average_end"] = os.getloadavg()
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1, default=float))
    return report


if __name__ == "__main__":
    main()
