"""Data-parallel training on CPU: 2 gloo ranks x 1 thread against 1 process x 2 threads.

WordNet glosses with lemmas (``benchmarks.bench_text.make_text``: 80/20 split, TF-IDF), the
defaults of ``HierarchicalClassifier(tree, semantics="terminal", random_state=0)`` with
``max_epochs`` fixed, each run in a fresh process (``OMP_WAIT_POLICY=PASSIVE``):

- ``1 process x 2 threads``: the training rows, ``batch_size`` 256 (the same estimator a user
  would run without the callback: twice the steps of a rank);
- ``1 process x 2 threads, batch 512``: the same training as the two ranks together (one step
  per rank step, with the ranks' batches combined);
- ``2 ranks x 1 thread``: ``torchrun --standalone --nproc_per_node 2`` with gloo,
  ``OMP_NUM_THREADS=1``, the :class:`DataParallel` callback, each rank fitting every second row.

Reported per run: seconds per epoch (skorch's ``dur``; the mean of the epochs after the first,
and the first apart), and for the ranks the bytes each rank receives per step by the
collectives' standard algorithms (``DataParallel.traffic_``) against the dense all-reduce of
every gradient (the whole tables). ``os.getloadavg()`` is recorded when every run starts and
ends. ``--steps N`` fits on ``N`` steps' worth of rows per rank (one epoch), for the bytes per
step at all nouns without a full epoch.

Usage::

    python -m benchmarks.bench_data_parallel --subsets person,animal --epochs 3
    python -m benchmarks.bench_data_parallel --subsets nouns --steps 20 --runs ranks
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
RUNS = {  # name: (ranks, threads per rank, batch size)
    "single": (1, 2, 256),
    "single-512": (1, 2, 512),
    "ranks": (2, 1, 256),
}


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def worker(args: argparse.Namespace) -> None:
    """One rank (or the one process) of a run: fit, then rank 0 writes its figures."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    from hiclass_parallel import Tree
    from hiclass_parallel.estimators import DataParallel, HierarchicalClassifier

    with open(args.data, "rb") as f:
        data = pickle.load(f)
    X, y = data["X_train"], data["y_train"]
    callbacks = [DataParallel()] if world > 1 else []
    clf = HierarchicalClassifier(Tree.from_parents(data["parents"]), semantics="terminal", random_state=0, max_epochs=args.epochs,
                                 batch_size=args.batch, callbacks=callbacks)
    load_start = _load()
    clf.fit(X[rank::world], y[rank::world])
    result: dict[str, Any] = {"world": world, "threads": args.threads, "batch_size": args.batch,
                              "rows_per_rank": int(X[rank::world].shape[0]),
                              "epoch_s": [float(d) for d in clf.net_.history[:, "dur"]],
                              "load_average": [load_start, _load()]}
    if world > 1:
        (cb,) = [cb for _, cb in clf.net_.callbacks_ if isinstance(cb, DataParallel)]
        traffic = getattr(cb, "traffic_", None)
        if traffic:
            steps = max(traffic["steps"], 1)
            result["bytes_per_step"] = traffic["bytes"] / steps
            result["rows_per_step"] = {name: n / steps for name, n in traffic["rows"].items()}
            result["callback_s_per_step"] = traffic["seconds"] / steps
        # The dense all-reduce of every gradient (before this callback sent only touched rows).
        numel = sum(p.numel() * p.element_size() for p in clf.net_.module_.parameters() if p.requires_grad)
        result["dense_bytes_per_step"] = 2 * (world - 1) / world * numel
        dist.destroy_process_group()
    if rank == 0:
        Path(args.result).write_text(json.dumps(result))


def prepare(name: str, steps: int | None, work: Path) -> Path:
    """Encode the subset once and pickle the training rows the runs share."""
    from benchmarks.bench_text import SUBSETS, make_text

    data = make_text(SUBSETS[name])
    X, y = data["X_train"], data["y_train"]
    n = X.shape[0] - X.shape[0] % 2  # equal shards: every rank runs as many steps
    rows = np.arange(n)
    if steps:
        rows = np.random.default_rng(0).permutation(X.shape[0])[: min(n, 2 * 256 * steps)]
    path = work / f"{name}.pkl"
    with open(path, "wb") as f:
        # The tree by its parent ids, so that its labels are the node ids ``y`` holds.
        pickle.dump({"X_train": X[rows], "y_train": y[rows], "parents": np.asarray(data["tree"].parents)}, f)
    print(f"{name}: {data['tree'].n_classes} classes, {len(rows)} rows, {X.shape[1]} features", flush=True)
    return path


def launch(run: str, data: Path, epochs: int, work: Path) -> dict[str, Any]:
    ranks, threads, batch = RUNS[run]
    result = work / f"{run}.json"
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    cmd = [sys.executable, "-m", "benchmarks.bench_data_parallel", "--worker", "--data", str(data),
           "--result", str(result), "--epochs", str(epochs), "--threads", str(threads), "--batch", str(batch)]
    if ranks > 1:
        cmd[1:3] = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", "--module",
                    "benchmarks.bench_data_parallel"]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    out = json.loads(result.read_text())
    out["wall_s"] = time.perf_counter() - start
    later = out["epoch_s"][1:] or out["epoch_s"]
    out["epoch_mean_s"] = float(np.mean(later))
    return out


def _traffic(out: dict[str, Any]) -> str:
    if "bytes_per_step" not in out:
        return ""
    rows = ", ".join(f"{name} {n:,.0f}" for name, n in out["rows_per_step"].items())
    return (f"; per step: {out['bytes_per_step'] / 2**20:.2f} MiB received per rank (a dense all-reduce: "
            f"{out['dense_bytes_per_step'] / 2**20:.1f} MiB), {out['callback_s_per_step'] * 1e3:.0f} ms in the "
            f"callback, rows {rows}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--subsets", default="person,animal")
    p.add_argument("--runs", default=",".join(RUNS))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--repeat", type=int, default=1, help="runs of each kind, interleaved")
    p.add_argument("--steps", type=int, default=None, help="rows for this many steps per rank (one epoch)")
    p.add_argument("--out", default=None, help="JSON file for the figures")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=256, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    epochs = 1 if args.steps else args.epochs
    report: dict[str, Any] = {"cpus": os.cpu_count(), "OMP_WAIT_POLICY": "PASSIVE", "subsets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.subsets.split(","):
            data = prepare(name, args.steps, Path(tmp))
            runs: dict[str, Any] = {run: [] for run in args.runs.split(",")}
            report["subsets"][name] = runs
            for _ in range(args.repeat):  # interleaved, so that a change of load meets every run
                for run in args.runs.split(","):
                    runs[run].append(out := launch(run, data, epochs, Path(tmp)))
                    print(f"  {run}: {out['epoch_mean_s']:.2f} s/epoch (epochs {[round(d, 2) for d in out['epoch_s']]}), "
                          f"load {out['load_average']}{_traffic(out)}", flush=True)
            if "single" in runs and "ranks" in runs:
                median = {run: float(np.median([o["epoch_mean_s"] for o in runs[run]])) for run in ("single", "ranks")}
                runs["ratio_ranks_to_single"] = median["ranks"] / median["single"]
                print(f"  2 ranks / 1 process (medians): {runs['ratio_ranks_to_single']:.2f}x", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
