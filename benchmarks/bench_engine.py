"""Lean engine vs the paper's dense formulation vs a flat softmax: time and peak memory.

Batch of ``--batch`` (default 100) float32 score vectors over the WordNet 3.0 tree (117,659
classes, 20 levels) -- or, with ``--tree synthetic`` or when the WordNet file is missing, a
random tree of the same size and depth with shuffled node ids. Measured on the CPU, and on
CUDA when present:

- log-softmax: flat ``torch.log_softmax`` over all classes (the reference), the paper's dense
  ``partition_scores`` + ``log_softmax`` over ``(B, L, C)``, the lean ``group_log_softmax``
  (level and sibling partitions; NumPy input too; on the CPU the level partition also without
  the optional C kernel, as where it was not built);
- loss forward + backward: flat ``cross_entropy``, the paper's dense loss (partition, flatten,
  drop padded rows, ``cross_entropy``), the lean ``HierarchicalCrossEntropy``;
- decoding: the exact best path over all candidates, dense (``(B, C, L)`` gather of the
  dense log-probabilities along every path) vs lean ``best_paths``.

Targets: lean level log-softmax within 5x of flat and >= 20x faster than dense;
loss forward + backward within 3x of flat cross-entropy; best-path decoding within 5x of flat
log-softmax; no ``(B, L, C)`` allocation on the lean path (see the peak memory column).

The variants of one table take turns ``--repeat`` times and the median (and fastest) round
counts, which keeps most of the noise of a shared machine out of the ratios. Peak memory is
the growth of the resident set during one call (CPU: ``VmHWM``, reset through
``/proc/self/clear_refs``, measured after the timings with every allocation of 64 KiB or more
made a fresh ``mmap`` so that recycled heap memory counts too) or of
``torch.cuda.max_memory_allocated``; it includes the result.

Run::

    python -m benchmarks.bench_engine            # full
    python -m benchmarks.bench_engine --quick    # 3 rounds, no NumPy rows
    python benchmarks/bench_engine.py --tree synthetic --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hiclass_parallel import Tree  # noqa: E402

N_CLASSES, N_LEVELS = 117_659, 20


# ---------------------------------------------------------------------------- trees
def synthetic_tree(n_classes: int = N_CLASSES, n_levels: int = N_LEVELS, seed: int = 0) -> Tree:
    """A random tree shaped like WordNet: many top-level classes, a bulge of mid-depth levels,
    heavy-tailed numbers of children, node ids shuffled (not sorted by depth)."""
    rng = np.random.default_rng(seed)
    top = min(22_337, n_classes // 5)
    bell = np.exp(-0.5 * ((np.arange(1, n_levels) - 8) / 3.5) ** 2) + 0.002
    sizes = np.maximum(1, np.floor(bell / bell.sum() * (n_classes - top))).astype(np.int64)
    sizes = np.concatenate([[top], sizes])
    sizes[int(np.argmax(sizes))] += n_classes - int(sizes.sum())
    parents, previous, start = [], None, 0
    for level, size in enumerate(sizes):
        ids = np.arange(start, start + size)
        if level == 0:
            parents.append(np.full(size, -1))
        else:
            weight = rng.pareto(1.2, size=previous.size) + 1e-3
            parents.append(rng.choice(previous, size=size, p=weight / weight.sum()))
        previous, start = ids, start + size
    parents = np.concatenate(parents)
    new_id = rng.permutation(n_classes)
    shuffled = np.full(n_classes, -1)
    shuffled[new_id] = np.where(parents >= 0, new_id[np.maximum(parents, 0)], -1)
    return Tree.from_parents(shuffled)


def load_tree(kind: str) -> tuple[Tree, str]:
    if kind == "wordnet":
        try:
            from hiclass_parallel.datasets import load_wordnet_tree

            return load_wordnet_tree(), "WordNet 3.0"
        except Exception as exc:  # the data file is built by another part of the project
            print(f"WordNet tree unavailable ({type(exc).__name__}: {exc}); using a synthetic tree", file=sys.stderr)
    return synthetic_tree(), f"synthetic ({N_CLASSES:,} classes, {N_LEVELS} levels, shuffled ids)"


# ---------------------------------------------------------------------------- measuring
def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _hwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _libc() -> Any:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def exact_cpu_peaks() -> bool:
    """Make every allocation of 64 KiB or more a fresh ``mmap`` returned at ``free``.

    glibc otherwise recycles freed heap memory, so the resident set would not grow during a
    call that reuses it and its peak would read as 0. Called after the timings, which it
    would slow down (every large buffer page-faulted in again).
    """
    libc = _libc()
    M_MMAP_THRESHOLD = -3
    return bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024))


def peak_memory_mib(fn: Callable[[], Any], cuda: bool) -> float | None:
    """Extra memory at the peak of one call (the result included), in MiB."""
    gc.collect()
    if cuda:
        import torch

        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        del out
        return peak / 2**20
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)  # hand free heap pages back, so reusing them shows in the RSS
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current RSS
    except OSError:
        return None
    base = _rss_kib()
    out = fn()
    peak = _hwm_kib() - base
    del out
    return peak / 1024


def time_rounds(fns: dict[str, Callable[[], Any]], repeat: int, cuda: bool) -> dict[str, tuple[float, float]]:
    """Median and minimum seconds of each function; the functions take turns."""
    sync = (lambda: __import__("torch").cuda.synchronize()) if cuda else (lambda: None)
    for fn in fns.values():  # warm-up: caches, layouts, allocator
        fn()
    sync()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            out = fn()
            sync()
            times[name].append(time.perf_counter() - start)
            del out
    return {name: (float(np.median(t)), float(np.min(t))) for name, t in times.items()}


# ---------------------------------------------------------------------------- the contenders
def build_cases(tree: Tree, batch: int, device: str, quick: bool) -> dict[str, dict[str, Callable[[], Any]]]:
    import torch
    import torch.nn.functional as F

    from hiclass_parallel import labels_to_paths, partition_scores
    from hiclass_parallel.losses import HierarchicalCrossEntropy
    from hiclass_parallel.ops.decode import best_paths
    from hiclass_parallel.ops.groups import group_log_softmax

    C, L = tree.n_classes, tree.n_levels
    gen = torch.Generator().manual_seed(0)
    scores = (torch.randn(batch, C, generator=gen) * 3).to(device)
    scores_np = scores.cpu().numpy()
    leaves = torch.as_tensor(np.array(tree.leaves))
    labels = leaves[torch.randint(len(leaves), (batch,), generator=gen)].to(device)
    flat_target = labels
    paths = labels_to_paths(labels, tree)
    depth = torch.as_tensor(np.array(tree.depth), dtype=torch.int64, device=device)
    classes = torch.arange(C, device=device)
    tree_paths = torch.as_tensor(np.array(tree.paths), dtype=torch.int64, device=device)
    leaf_mask = torch.as_tensor(np.array(tree.is_leaf), device=device)

    def dense_log_softmax():
        return torch.log_softmax(partition_scores(scores, tree), -1)

    def dense_loss():
        x = scores.detach().requires_grad_()
        dense = partition_scores(x, tree)
        keep = paths != -1
        loss = F.cross_entropy(dense[keep], paths[keep])
        loss.backward()
        return x.grad

    def flat_loss():
        x = scores.detach().requires_grad_()
        F.cross_entropy(x, flat_target).backward()
        return x.grad

    criteria = {p: HierarchicalCrossEntropy(tree, p).to(device) for p in ("level", "sibling")}
    # what the classifier trains with: its targets are checked once by PathEncoder, so the
    # criterion skips the per-call check (a device-to-host sync on a GPU)
    criteria["level, validate=False"] = HierarchicalCrossEntropy(tree, "level", validate=False).to(device)

    def lean_loss(partition):
        def run():
            x = scores.detach().requires_grad_()
            criteria[partition](x, labels).backward()
            return x.grad

        return run

    def dense_decode():
        # The dense route to the same exact answer: log-probabilities of every class at its
        # own level from the (B, L, C) tensor, then a (B, C, L) gather along every path.
        own = torch.log_softmax(partition_scores(scores, tree), -1)[:, depth, classes]
        along = own[:, tree_paths.clamp_min(0)] * (tree_paths >= 0)
        joint = along.sum(-1).masked_fill(~leaf_mask, -torch.inf)
        value, node = joint.max(1)
        return tree_paths[node], value

    flat = {"flat log_softmax": lambda: torch.log_softmax(scores, 1)}
    cases = {
        "log-softmax": {
            **flat,
            "dense paper (B, L, C)": dense_log_softmax,
            "lean level": lambda: group_log_softmax(scores, tree, "level"),
            "lean sibling": lambda: group_log_softmax(scores, tree, "sibling"),
        },
        "loss forward+backward": {
            "flat cross_entropy": flat_loss,
            "dense paper (B, L, C)": dense_loss,
            "lean level": lean_loss("level"),
            "lean sibling": lean_loss("sibling"),
            "lean level, validate=False": lean_loss("level, validate=False"),
        },
        "best-path decoding": {
            **flat,
            "dense (B, L, C) + (B, C, L)": dense_decode,
            "lean level": lambda: best_paths(scores, tree, "level"),
            "lean sibling": lambda: best_paths(scores, tree, "sibling"),
        },
    }
    if device == "cpu" and not quick:
        cases["log-softmax"]["lean level, NumPy"] = lambda: group_log_softmax(scores_np, tree, "level")
        cases["log-softmax"]["lean level, without the C kernel"] = lambda: _without_c_kernel(group_log_softmax, scores, tree)
        cases["best-path decoding"]["lean level, NumPy"] = lambda: best_paths(scores_np, tree, "level")
    return cases


def _without_c_kernel(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on the NumPy route, as where the optional C kernel was not built."""
    from hiclass_parallel.ops.engine._backends import use_backend

    with use_backend("numpy"):
        return fn(*args)


TARGETS = {
    ("log-softmax", "lean level"): ("flat log_softmax", 5.0, "within 5x of flat"),
    ("loss forward+backward", "lean level"): ("flat cross_entropy", 3.0, "within 3x of flat"),
    ("best-path decoding", "lean level"): ("flat log_softmax", 5.0, "within 5x of flat"),
    ("best-path decoding", "lean sibling"): ("flat log_softmax", 5.0, "within 5x of flat"),
}


def run(tree: Tree, tree_name: str, batch: int, devices: list[str], repeat: int, quick: bool) -> dict[str, Any]:
    import torch

    report: dict[str, Any] = {
        "tree": tree_name,
        "n_classes": tree.n_classes,
        "n_levels": tree.n_levels,
        "batch": batch,
        "dense_bytes": batch * tree.n_levels * tree.n_classes * 4,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "devices": {},
        "load_average_before": os.getloadavg()[0],
    }
    built = {dev: build_cases(tree, batch, dev, quick) for dev in devices}
    for dev, cases in built.items():
        report["devices"][dev] = {
            table: {
                name: {"median_ms": t[0] * 1e3, "min_ms": t[1] * 1e3, "peak_mib": None}
                for name, t in time_rounds(fns, repeat, dev.startswith("cuda")).items()
            }
            for table, fns in cases.items()
        }
    report["load_average_after"] = os.getloadavg()[0]
    report["exact_cpu_peaks"] = exact_cpu_peaks()
    for dev, cases in built.items():
        for table, fns in cases.items():
            for name, fn in fns.items():
                report["devices"][dev][table][name]["peak_mib"] = peak_memory_mib(fn, dev.startswith("cuda"))
    return report


def print_report(report: dict[str, Any]) -> None:
    print(
        f"tree: {report['tree']}: {report['n_classes']:,} classes, {report['n_levels']} levels; "
        f"batch {report['batch']}; dense (B, L, C) float32 = {report['dense_bytes'] / 2**20:.0f} MiB; "
        f"torch {report['torch']} ({report['threads']} threads); {report['cpu_count']} CPUs, "
        f"load average {report['load_average_before']:.1f} -> {report['load_average_after']:.1f}"
    )
    for dev, tables in report["devices"].items():
        for table, rows in tables.items():
            ref_name = next(iter(rows))
            ref = rows[ref_name]["median_ms"]
            dense = next((r["median_ms"] for n, r in rows.items() if n.startswith("dense")), None)
            print(f"\n[{dev}] {table}")
            print(f"  {'':30s} {'median ms':>10s} {'min ms':>9s} {'x ' + ref_name[:10]:>14s} {'dense / x':>10s} {'peak MiB':>9s}")
            for name, r in rows.items():
                speedup = f"{dense / r['median_ms']:.1f}" if dense else ""
                peak = "" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}"
                print(
                    f"  {name:30s} {r['median_ms']:10.1f} {r['min_ms']:9.1f} {r['median_ms'] / ref:14.2f} {speedup:>10s} {peak:>9s}"
                )
        print(f"\n[{dev}] targets")
        for (table, name), (ref_name, limit, text) in TARGETS.items():
            rows = tables[table]
            ratio = rows[name]["median_ms"] / rows[ref_name]["median_ms"]
            print(f"  {table}, {name}: {ratio:.2f}x {ref_name} ({text}): {'met' if ratio <= limit else 'MISSED'}")
        rows = tables["log-softmax"]
        dense_ratio = rows["dense paper (B, L, C)"]["median_ms"] / rows["lean level"]["median_ms"]
        print(f"  log-softmax, lean level vs dense: {dense_ratio:.1f}x faster (>= 20x): {'met' if dense_ratio >= 20 else 'MISSED'}")
        lean_peaks = [r["peak_mib"] for t in tables.values() for n, r in t.items() if n.startswith("lean")]
        if all(p is not None for p in lean_peaks):
            dense_mib = report["dense_bytes"] / 2**20
            print(
                f"  largest lean peak: {max(lean_peaks):.0f} MiB vs (B, L, C) = {dense_mib:.0f} MiB: "
                f"{'no (B, L, C) allocation' if max(lean_peaks) < dense_mib / 2 else 'CHECK'}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, no NumPy rows")
    parser.add_argument("--tree", choices=("wordnet", "synthetic"), default="wordnet")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=15, help="rounds per table (default 15)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: CPU, and CUDA when present")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    devices = ["cpu"] if args.device in ("auto", "cpu") else []
    if args.device in ("auto", "cuda") and torch.cuda.is_available():
        devices.append("cuda")
    if not devices:
        print("no CUDA device", file=sys.stderr)
        return 1
    tree, name = load_tree(args.tree)
    report = run(tree, name, args.batch, devices, 3 if args.quick else args.repeat, args.quick)
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
