"""Exploration on a CUDA GPU: which formulation of the per-group reductions is fastest there.

At batch 100 over WordNet's 117,659 classes every lean kernel moves tens of MB, which an H100
does in microseconds, so the time goes to launching kernels: the CPU-tuned layout (13 size
buckets for the level partition, 24 for sibling, about 7 launches each) costs ~100 launches.
This script times, on CUDA, candidate formulations with few launches and checks each against
a float64 reference; ``--profile`` shows where the time of the shipped (Triton) calls goes and
sweeps the tile shapes of the path-sum kernel. What it found (H100, batch 100, level
partition): the bucketed torch-op layout 1.25 ms for the log-normalisers, coarser buckets
0.47 ms, ``scatter_reduce(amax)`` + ``index_add_`` 4.2 ms (atomics contend on 20 groups),
a row-max shift + one-hot matmul 0.24 ms but wrong where a level underflows; hence the Triton
kernels (docs/engine.md, "How it runs").

    python -m benchmarks.explore_cuda_segments            # formulations
    python -m benchmarks.explore_cuda_segments --profile  # the shipped kernels
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from hiclass_parallel.datasets import load_wordnet_tree  # noqa: E402
from hiclass_parallel.ops.engine import _array_ops, _bucketed, _layout  # noqa: E402
from hiclass_parallel.ops import groups as G  # noqa: E402


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timeit(fn, repeat=int(os.environ.get("REPEAT", 60))):
    for _ in range(5):
        fn()
    sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    tree = load_wordnet_tree()
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a smoke test only
    B = 100
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(B, tree.n_classes, generator=gen) * 3).to(dev)
    # a row whose deep levels sit 200 below its top level: the row-max shift underflows there
    x[1] -= 200 * torch.as_tensor(tree.depth > 3, dtype=torch.float32, device=dev)
    rows = []
    for partition in ("level", "sibling"):
        lay = _layout.layout(tree, partition, False)
        col_group = torch.as_tensor(lay.host["col_group"], device=dev)
        n_groups = lay.n_groups
        ref = G.group_logsumexp(x.double().cpu(), tree, partition).to(dev)

        def scatter_amax():
            idx = col_group.expand(B, -1)
            m = x.new_full((B, n_groups), -math.inf).scatter_reduce_(1, idx, x, "amax")
            m = torch.nan_to_num(m, neginf=0.0)
            e = (x - m.index_select(1, col_group)).exp_()
            s = x.new_zeros((B, n_groups)).index_add_(1, col_group, e)
            return s.log_().add_(m)

        def rowshift():
            m = x.amax(1, keepdim=True)
            e = (x - m).exp_()
            s = x.new_zeros((B, n_groups)).index_add_(1, col_group, e)
            return s.log_().add_(m)

        onehot = torch.zeros(tree.n_classes, n_groups, device=dev)
        if partition == "level":
            onehot[torch.arange(tree.n_classes, device=dev), col_group] = 1.0

        def rowshift_mm():
            m = x.amax(1, keepdim=True)
            e = (x - m).exp_()
            return (e @ onehot).log_().add_(m)

        saved = _layout._BUCKET_OVERHEAD
        _layout._BUCKET_OVERHEAD = 200_000
        big = _layout._build_layout(tree, partition, False)
        _layout._BUCKET_OVERHEAD = saved
        arr_big = _layout.layout_arrays(big, x)

        def big_buckets():
            return _bucketed.lse_rows(_array_ops.TorchOps(x), x, big, arr_big, None)

        variants = {
            "current": lambda: G.group_logsumexp(x, tree, partition),
            f"buckets, overhead 200k ({len(big.buckets)})": big_buckets,
            "scatter amax + index_add": scatter_amax,
            "row-max shift + index_add": rowshift,
        }
        if partition == "level":
            variants["row-max shift + matmul"] = rowshift_mm
        for name, fn in variants.items():
            got = fn()
            err = ((got.double() - ref).abs() / (1 + ref.abs())).nan_to_num(nan=math.inf).max().item()
            rows.append((partition, "lse", name, timeit(fn), err))

        # joint log-probabilities of every node: level by level (current) vs pointer doubling
        parents = np.where(tree.parents < 0, tree.n_classes, tree.parents).astype(np.int64)
        jumps = []
        p = np.concatenate([parents, [tree.n_classes]])
        for _ in range(max(1, math.ceil(math.log2(tree.n_levels)))):
            jumps.append(torch.as_tensor(p, device=dev))
            p = p[p]
        ref_joint = G.node_log_probs(x.double().cpu(), tree, partition).to(dev)

        def doubling():
            lse = scatter_amax()
            j = torch.cat([x - lse.index_select(1, col_group), x.new_zeros(B, 1)], 1)
            for jump in jumps:
                j = j + j.index_select(1, jump)
            return j[:, :-1]

        for name, fn in {"current": lambda: G.node_log_probs(x, tree, partition), "pointer doubling": doubling}.items():
            got = fn()
            err = ((got.double() - ref_joint).abs() / (1 + ref_joint.abs())).max().item()
            rows.append((partition, "joint", name, timeit(fn), err))

    flat = timeit(lambda: torch.log_softmax(x, 1))
    print(f"\nflat log_softmax: {flat:.3f} ms (batch {B}, {tree.n_classes} classes, {torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu'})")
    print(f"{'partition':10} {'what':6} {'variant':40} {'ms':>8} {'x flat':>7} {'max rel err':>12}")
    for partition, what, name, ms, err in rows:
        print(f"{partition:10} {what:6} {name:40} {ms:8.3f} {ms / flat:7.2f} {err:12.2e}")


def profile():
    """Where the time of the lean calls goes on CUDA: kernels, launches and host time per op."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from hiclass_parallel.losses import HierarchicalCrossEntropy
    from hiclass_parallel.ops.decode import best_paths

    tree = load_wordnet_tree()
    x = torch.randn(100, tree.n_classes, device="cuda") * 3
    y = torch.as_tensor(np.array(tree.leaves)[np.random.default_rng(0).integers(0, len(tree.leaves), 100)], device="cuda")
    crit = HierarchicalCrossEntropy(tree).cuda()

    def loss():
        xg = x.detach().requires_grad_()
        crit(xg, y).backward()

    calls = {
        "group_log_softmax level": lambda: G.group_log_softmax(x, tree, "level"),
        "loss level fwd+bwd": loss,
        "best_paths level": lambda: best_paths(x, tree, "level"),
    }
    # tile shapes of the path-sum kernel
    from hiclass_parallel.ops.engine import _triton

    lay = _layout.layout(tree, "level", False)
    plan = _triton.plan_for(lay, x)
    logp_t = G.group_log_softmax(x, tree, "level").t().contiguous()
    saved = (_triton._PATH_BLOCK, _triton._PATH_ROWS, _triton._PATH_WARPS)
    ref = None
    for shape in [(128, 16, 4), (256, 16, 4), (64, 32, 4), (128, 32, 4), (64, 16, 2), (256, 32, 8)]:
        _triton._PATH_BLOCK, _triton._PATH_ROWS, _triton._PATH_WARPS = shape
        got = _triton.path_sums(logp_t, plan)
        ref = got if ref is None else ref
        ms = timeit(lambda: _triton.path_sums(logp_t, plan))
        print(f"path_sums BLOCK, ROWS, warps = {shape}: {ms:.3f} ms, max diff {(got - ref).abs().max().item():.2e}")
    _triton._PATH_BLOCK, _triton._PATH_ROWS, _triton._PATH_WARPS = saved
    print(f"transpose of the log-probabilities: {timeit(lambda: logp_t.t().contiguous()):.3f} ms")
    for name, fn in calls.items():
        for _ in range(5):
            fn()
        sync()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn()
            sync()
        print(f"\n===== {name} (10 calls): {timeit(fn):.3f} ms per call")
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=40))


if __name__ == "__main__":
    if "--profile" in sys.argv:
        profile()
    else:
        main()
