"""A roofline for training: each step's arithmetic and memory traffic against its measured time.

What the machine can do (:func:`machine_rates`, at the start and the end of a run):

- the sustained float32 FLOP rate: ``torch.mm`` of two 2048 x 2048 matrices (MKL), best of a
  few, at 1 and 2 threads;
- the memory bandwidth: STREAM-style copy (``b = a``, 2 x 4 bytes per element) and triad
  (``a = b + s c``, 3 x 4 bytes per element) over 256 MiB arrays, best of a few, at 1 and 2
  threads (torch's element-wise kernels split large tensors over its threads); and, for the
  record, a gather of random 1 KiB rows (the access pattern of a sparse step).

What a step must do (:func:`batch_structure`, :func:`step_cost`): counted from the batches of a
real default fit, ``HierarchicalClassifier(tree, semantics="terminal")`` (batch 256, hidden 256,
the in-batch level term at its default weight). The fused step's ``ps_prepare`` is wrapped
during the fit, so the batches counted are the ones trained on, and its sizes (distinct
columns U, distinct features NF, pairs P, path and level rows, non-zeros, dense columns D) are
checked against a NumPy recount that also gives what the kernel does not report: the distinct
(sample, column) entries E and how many of them fall outside the dense block (Es). Per step:

- FLOPs: hidden rows ``2 nnz H``; scores of the sparse entries ``2 Es H``; the dense block's
  three products (scores, ``G^T h``, ``G W_D``) ``3 x 2 B D H``; the softmax rows (2 exp and
  about 5 other operations per pair, counted as 7); the sparse entries' backward ``4 Es H``;
  the input gradient ``2 nnz H``; Adam ``13 (NF + U + 1) H`` (and the biases);
- bytes, the DRAM traffic of the passes as the step is built: every touched row of ``W_in``
  and ``W_out`` (and ``b_out``) read once by the forward, its gradient written once, and Adam's
  ``adam_rows`` reading p, m, v, g and writing p, m, v on ``W_out`` (24 bytes per float, the
  first moment in bfloat16 as the classifier's groups keep it: 2 + 2 of them): 32 bytes per
  touched float; on ``W_in``, whose second moment is one value per row (LazyAdam's
  ``second_moment="row"``, the classifier's default there), p, m, g read and p, m written: 24
  bytes per touched float and 8 per row; plus the batch's CSR input. (Before the bfloat16
  first moments, 2026-11-27: 36 and 28.) The step's own (B, H) and
  (B, D) blocks (256 KiB each) stay in cache and are not counted; nor is the backward's second
  read of the sparse columns' rows (a few MiB, read again within milliseconds, from the 32 MiB
  L3). The least any Adam step could move is 20 bytes per touched float of ``W_out`` (read and
  write p, m, v once) and 12 of ``W_in`` (p, m).

The floor of a step is the roofline's ``max(flops / flop_rate, bytes / bandwidth)`` at the
fit's thread count, with the best rates seen (measured at the start and the end of the run, and
any given with ``--rates``: on a shared machine the highest rate seen is the nearest to what the
machine can do, and the lowest floor) (compute and memory traffic overlapped perfectly); ``flops / rate + bytes /
bandwidth`` (no overlap) is reported beside it. The bandwidth is the triad's.

What a step takes: the same fit, timed per training batch by a skorch callback
(``on_batch_begin`` to ``on_batch_end``: forward, backward and the optimizer step, without the
data loader or validation), on the fused route and on the torch route
(``HICLASS_PARALLEL_NATIVE=0``), each in a fresh process with ``OMP_WAIT_POLICY=PASSIVE``, after
a toy fit that pays the process's one-time costs. The fused route's phases are timed by
wrapping the C calls (``ps_prepare``, ``ps_forward``, ``ps_backward``, ``ps_finish``,
``adam_rows``); the rest of ``fused_step`` is the three BLAS products and torch glue. With the
fused update (the default, ``update_engine`` ``"fused"`` in the JSON) Adam on the big layers'
rows runs inside ``ps_backward`` (the output rows outside the dense block) and ``ps_finish``
(the input rows and the dense block's rows), and ``adam_rows`` updates only the biases. The
byte count of the floor stays the one above, for comparison with earlier runs: the fused
update moves less than it (neither writes nor reads back a gradient). Every
figure has ``os.getloadavg()`` beside it (the machine is shared).

Usage::

    python -m benchmarks.bench_roofline --subsets person,artifact,nouns \\
        --out benchmarks/results/bench_roofline.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
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
ENGINES = ("fused", "torch")
#: Adam's arithmetic per float: m (3), v (4), the update (sqrt, 2 divisions, add, multiply, subtract).
ADAM_FLOPS = 13
#: DRAM bytes per touched parameter float: forward read 4, gradient write 4, adam_rows 24
#: (p, m, v, g read; p, m, v written; m in bfloat16, as SparseMLP's LazyAdam groups keep it),
#: or 16 with one second moment per row (the input layer).
BYTES_PER_TOUCHED_FLOAT = 32
BYTES_PER_TOUCHED_INPUT_FLOAT = 24
#: The kernel's dense block: the columns at least this share of the batch needs (and 8 samples).
DENSE_FRACTION = 0.25


def _load() -> float:
    return round(os.getloadavg()[0], 2)


# ---------------------------------------------------------------------------- the machine
def _best(fn: Any, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def machine_rates(threads: tuple[int, ...] = (1, 2), repeats: int = 7, n: int = 2048, mib: int = 256) -> dict:
    """Sustained FLOP rate (float32 matmul) and memory bandwidth (copy, triad, row gather)."""
    import torch

    before = torch.get_num_threads()
    out: dict[str, Any] = {"load_before": _load()}
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    size = mib * 2**20 // 4
    x, y, z = torch.rand(size), torch.rand(size), torch.rand(size)
    table = torch.rand(size // 256, 256)
    rows = torch.randint(0, table.shape[0], (table.shape[0] // 8,))
    gathered = torch.empty(rows.shape[0], 256)
    try:
        for t in threads:
            torch.set_num_threads(t)
            mm = _best(lambda: torch.mm(a, b, out=c), repeats)
            copy = _best(lambda: y.copy_(x), repeats)
            triad = _best(lambda: torch.add(y, z, alpha=3.0, out=x), repeats)
            gather = _best(lambda: torch.index_select(table, 0, rows, out=gathered), repeats)
            out[str(t)] = {
                "gflops": 2 * n**3 / mm / 1e9,
                "copy_gbs": 2 * 4 * size / copy / 1e9,
                "triad_gbs": 3 * 4 * size / triad / 1e9,
                "gather_gbs": 2 * gathered.numel() * 4 / gather / 1e9,
                "load": _load(),
            }
    finally:
        torch.set_num_threads(before)
    out["load_after"] = _load()
    return out


# ---------------------------------------------------------------------------- a step's work
def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for each (s, n)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return offsets + np.arange(total, dtype=np.int64)


def batch_structure(plan: Any, target: np.ndarray, crow: np.ndarray, col: np.ndarray, *, stop_rows: bool,
                    level: bool, n_dense: int | None = None) -> dict[str, int]:
    """The counts of one step, as ``ps_prepare`` builds them (``_path_step.c``), in NumPy:
    path and stop rows, the in-batch level rows, their (sample, column) pairs, the distinct
    entries and columns, the dense block, the distinct input features.

    The dense block is the ``n_dense`` columns with the most entries (the kernel's count, which
    its rule decides: columns at least ``DENSE_FRACTION`` of the batch needs), or by that rule."""
    B = int(target.shape[0])
    labelled = np.flatnonzero(target >= 0)
    paths = plan.paths[target[labelled]]  # (B', L), -1 padded
    s_idx, depth = np.nonzero(paths >= 0)
    sample = labelled[s_idx]
    groups = plan.group_of[paths[s_idx, depth]]
    if stop_rows and plan.stop:
        child = plan.child_group[target[labelled]]
        has = child >= 0
        sample = np.concatenate([sample, labelled[has]])
        groups = np.concatenate([groups, child[has]])
    n_path_rows = int(sample.shape[0])
    lengths = plan.group_ptr[groups + 1] - plan.group_ptr[groups]
    pair_sample = [np.repeat(sample, lengths)]
    pair_col = [plan.group_cols[_ranges(plan.group_ptr[groups], lengths)]]
    n_level_rows = 0
    if level:
        for d in range(plan.n_levels):
            at_d = paths[:, d]
            nodes = np.unique(at_d[at_d >= 0])
            rows_d = labelled[at_d >= 0]
            n_level_rows += rows_d.shape[0]
            pair_sample.append(np.repeat(rows_d, nodes.shape[0]))
            pair_col.append(np.tile(nodes, rows_d.shape[0]))
    ps, pc = np.concatenate(pair_sample), np.concatenate(pair_col)
    entries = np.unique(ps * plan.n_outputs + pc)
    per_col = np.bincount(entries % plan.n_outputs, minlength=plan.n_outputs)
    per_col = per_col[per_col > 0]
    if n_dense is None:
        dense = per_col >= max(int(B * DENSE_FRACTION), 8)
    else:
        dense = np.zeros(per_col.shape[0], dtype=bool)
        dense[np.argsort(-per_col, kind="stable")[:n_dense]] = True
    nnz = int(crow[-1] - crow[0])
    return {"B": B, "R": n_path_rows, "LR": n_level_rows, "P": int(ps.shape[0]), "E": int(entries.shape[0]),
            "U": int(per_col.shape[0]), "D": int(dense.sum()), "Es": int(per_col[~dense].sum()),
            "NF": int(np.unique(col[crow[0]:crow[-1]]).shape[0]), "nnz": nnz}


def step_cost(n: dict[str, float], H: int) -> dict[str, float]:
    """FLOPs and DRAM bytes of one step with the counts ``n`` (see the module's docstring)."""
    B, D, Es, P, nnz, NF, U = (n[k] for k in ("B", "D", "Es", "P", "nnz", "NF", "U"))
    flops = {
        "hidden": 2 * nnz * H + B * H,
        "sparse_scores": 2 * Es * H,
        "dense_products": 3 * 2 * B * D * H,
        "softmax": 7 * P + P,  # + the per-entry gradient sums
        "sparse_backward": 4 * Es * H,
        "input_grad": 2 * nnz * H + 2 * B * H,
        "adam": ADAM_FLOPS * ((NF + U + 1) * H + U),
    }
    touched_in, touched_out = NF * H, U * H + U + H  # W_in rows; W_out rows, b_out entries, b_in
    nbytes = {"input_csr": nnz * 12 + (B + 1) * 8 + B * 8,
              "rows": BYTES_PER_TOUCHED_INPUT_FLOAT * touched_in + 8 * NF + BYTES_PER_TOUCHED_FLOAT * touched_out}
    return {"flops": float(sum(flops.values())), "bytes": float(sum(nbytes.values())),
            "flops_parts": {k: float(v) for k, v in flops.items()}, "bytes_parts": {k: float(v) for k, v in nbytes.items()},
            "min_bytes": 12.0 * touched_in + 20.0 * touched_out + nbytes["input_csr"]}


def floor_s(cost: dict[str, float], rates: dict[str, float]) -> dict[str, float]:
    compute = cost["flops"] / (rates["gflops"] * 1e9)
    memory = cost["bytes"] / (rates["triad_gbs"] * 1e9)
    return {"compute_s": compute, "memory_s": memory, "floor_s": max(compute, memory), "floor_sum_s": compute + memory}


# ---------------------------------------------------------------------------- the fit (worker)
class _Timed:
    """A ctypes function wrapped to add its time to ``phases[name]`` (and to see its arguments)."""

    def __init__(self, fn: Any, name: str, phases: dict[str, float], after: Any = None):
        self.fn, self.name, self.phases, self.after = fn, name, phases, after

    def __call__(self, *args: Any) -> Any:
        start = time.perf_counter()
        out = self.fn(*args)
        self.phases[self.name] = self.phases.get(self.name, 0.0) + time.perf_counter() - start
        if self.after is not None:
            self.after(args)
        return out


def _int64s(address: int, n: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_int64 * max(n, 1)).from_address(address))[:n].copy()


def _instrument(phases: dict[str, float], batches: list) -> None:
    """Time the fused step's C calls and keep each batch's structure inputs and C sizes."""
    from types import SimpleNamespace

    from hiclass_parallel.estimators.networks import _net, _optim
    from hiclass_parallel.estimators.networks import _native_path_step as native

    def keep(args: tuple) -> None:
        B, target, crow, col = args[1], args[2], args[3], args[4]
        crow_a = _int64s(crow, B + 1)
        batches.append((_int64s(target, B), crow_a, _int64s(col, int(crow_a[-1])), _int64s(args[-1], 7),
                        bool(args[-3]), bool(args[-2])))

    for attr, name in (("_prepare", "ps_prepare"), ("_forward", "ps_forward"), ("_backward", "ps_backward"),
                       ("_finish", "ps_finish"), ("_adam", "adam_rows")):
        fn = getattr(getattr(native, attr)(), name)
        wrapped = _Timed(fn, name, phases, keep if name == "ps_prepare" else None)
        namespace = SimpleNamespace(**{name: wrapped})
        setattr(native, attr, lambda _ns=namespace: _ns)

    def timed(fn: Any, name: str) -> Any:
        def inner(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                phases[name] = phases.get(name, 0.0) + time.perf_counter() - start
        return inner

    _net.fused_step = timed(_net.fused_step, "fused_step")
    _optim.LazyAdam.step = timed(_optim.LazyAdam.step, "optimizer_step")


def _phase_split(phases: dict[str, float], total_s: float, n_steps: int) -> dict[str, float]:
    """Mean ms per step of each part of a fused step (skorch's ``optimizer.step(closure)`` runs
    the closure, ``fused_step``, inside the optimizer's step)."""
    c_parts = ("ps_prepare", "ps_forward", "ps_backward", "ps_finish")
    out = {k: phases.get(k, 0.0) for k in c_parts}
    out["blas_and_torch_glue"] = phases.get("fused_step", 0.0) - sum(out.values())
    out["adam_rows"] = phases.get("adam_rows", 0.0)
    out["optimizer_python"] = phases.get("optimizer_step", 0.0) - phases.get("fused_step", 0.0) - out["adam_rows"]
    out["skorch_and_rest"] = total_s - phases.get("optimizer_step", 0.0)
    return {k: 1e3 * v / max(n_steps, 1) for k, v in out.items()}


def _blas_probe(B: int, D: int, H: int, repeats: int = 20) -> float:
    """Seconds of the dense block's three products alone (scores, G^T h, G W_D), best of a few."""
    import torch

    h, W, G, b = torch.randn(B, H), torch.randn(D, H), torch.randn(B, D), torch.randn(D)

    def products() -> None:
        torch.addmm(b, h, W.t())
        G.t() @ h
        G @ W

    return _best(products, repeats)


def _step_timer() -> Any:
    from skorch.callbacks import Callback

    class StepTimer(Callback):
        """Seconds of each training batch (forward, backward, optimizer step) and its size."""

        def initialize(self) -> StepTimer:
            self.steps_: list[tuple[float, int]] = []
            return self

        def on_batch_begin(self, net: Any, batch: Any = None, training: bool = False, **kw: Any) -> None:
            self._start = time.perf_counter()

        def on_batch_end(self, net: Any, batch: Any = None, training: bool = False, **kw: Any) -> None:
            if training:
                self.steps_.append((time.perf_counter() - self._start, int(batch[0].shape[0])))

    return StepTimer()


def worker(job: dict[str, Any]) -> dict[str, Any]:
    """One default fit in this process: step times, phases, and (fused) the counted structure."""
    import torch

    from benchmarks._text_methods import warm_up
    from benchmarks._worker import load_split
    from hiclass_parallel import HierarchicalClassifier, Tree
    from hiclass_parallel.ops.sibling_paths import sibling_plan

    data = load_split(job["data"])
    tree = Tree.from_parents(data["parents"])
    warm_up("hc-text", None, n_features=64)  # a toy fit first: the process's one-time costs untimed
    phases: dict[str, float] = {}
    batches: list = []
    if job["engine"] == "fused":
        _instrument(phases, batches)
    timer = _step_timer()
    params = {"random_state": 0, "callbacks": [timer]}
    if job.get("max_epochs"):
        params["max_epochs"] = int(job["max_epochs"])
    clf = HierarchicalClassifier(tree, semantics="terminal", **params)
    result: dict[str, Any] = {"engine": job["engine"], "threads": torch.get_num_threads(), "load_before": _load(),
                              "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")}
    start = time.perf_counter()
    clf.fit(data["X_train"], data["y_train"])
    result["fit_s"] = time.perf_counter() - start
    result["load_after"] = _load()
    net = clf.net_
    timer = next(cb for _, cb in net.callbacks_ if type(cb).__name__ == "StepTimer")  # the fit's copy
    result["step_engine"] = getattr(net, "step_engine_", None)
    result["update_engine"] = getattr(net, "update_engine_", None)  # "fused": Adam inside ps_backward/ps_finish
    steps = np.array([s for s, _ in timer.steps_])
    sizes = np.array([b for _, b in timer.steps_])
    full = steps[sizes == clf.batch_size] if (sizes == clf.batch_size).any() else steps
    result.update(batch_size=clf.batch_size, hidden=int(net.module_.input.embedding.weight.shape[1]),
                  n_steps=int(steps.size), epochs=len(net.history), steps_total_s=float(steps.sum()),
                  step_median_s=float(np.median(full)), step_mean_s=float(full.mean()),
                  step_p10_s=float(np.percentile(full, 10)), epoch_dur_s=[float(d) for d in net.history[:, "dur"]],
                  phases_s=phases)
    if phases:
        result["phases_ms_per_step"] = _phase_split(phases, float(steps.sum()), int(steps.size))
    if batches:
        plan = sibling_plan(net.criterion_.tree, net.criterion_.stop)
        counts, mismatches = [], 0
        for target, crow, col, c_sizes, stop_rows, level in batches:
            n = batch_structure(plan, target, crow, col, stop_rows=stop_rows, level=level, n_dense=int(c_sizes[6]))
            rule = batch_structure(plan, target, crow, col, stop_rows=stop_rows, level=level)["D"]
            mine = [n["U"], n["NF"], n["P"], n["R"], n["LR"], n["nnz"], rule]
            mismatches += int(mine != [int(v) for v in c_sizes])
            counts.append(n)
        result["structure_mismatches"] = mismatches
        full_counts = [c for c in counts if c["B"] == clf.batch_size] or counts
        result["structure"] = {k: float(np.mean([c[k] for c in full_counts])) for k in full_counts[0]}
        result["cost"] = step_cost(result["structure"], result["hidden"])
        st = result["structure"]
        result["blas_ms"] = 1e3 * _blas_probe(int(st["B"]), round(st["D"]), result["hidden"])
    return result


# ---------------------------------------------------------------------------- main
def _run_worker(job: dict[str, Any], engine: str, work: Path) -> dict[str, Any]:
    job = dict(job, engine=engine)
    path = work / f"job-{engine}.json"
    path.write_text(json.dumps(job))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if engine == "torch":
        env["HICLASS_PARALLEL_NATIVE"] = "0"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_roofline", "--worker", str(path)], check=False,
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"engine": engine, "status": "error", "error": proc.stderr[-3000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best_rates(measurements: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per thread count, the best of each rate over several :func:`machine_rates` measurements
    (on a shared machine, the highest rate seen is the nearest to what the machine can do)."""
    out: dict[str, dict[str, float]] = {}
    for m in measurements:
        for t, rates in m.items():
            if isinstance(rates, dict):
                mine = out.setdefault(t, {})
                for k, v in rates.items():
                    if k != "load":
                        mine[k] = max(mine.get(k, 0.0), v)
    return out


def _floors(report: dict[str, Any], engines: list[str]) -> None:
    rates_all = best_rates(report["machine"])
    report["rates"] = rates_all
    for sub in report["subsets"].values():
        fused = sub.get("fused", {})
        if "cost" not in fused:
            continue
        sub["floor"] = floor_s(fused["cost"], rates_all.get(str(fused["threads"]), rates_all["2"]))
        for engine in engines:
            if "step_median_s" in sub.get(engine, {}):
                sub[engine]["ratio_to_floor"] = sub[engine]["step_median_s"] / sub["floor"]["floor_s"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.bench_under_load import split_folder

    given = json.loads(Path(args.rates).read_text()) if args.rates else []
    report: dict[str, Any] = {"machine": [*(given if isinstance(given, list) else [given]), machine_rates()],
                              "subsets": {}}
    report["environment"] = {"cpus": os.cpu_count(), "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    print(json.dumps(report["machine"][-1]), flush=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_roofline_"))
    for name in args.subsets:
        folder = split_folder(name, work)
        sub: dict[str, Any] = {"info": json.loads((folder / "info.json").read_text())}
        job = {"data": str(folder), "max_epochs": args.max_epochs}
        for engine in args.engines:
            r = _run_worker(job, engine, folder)
            sub[engine] = r
            print(f"{name} {engine}: {_summary(r)}", flush=True)
        report["subsets"][name] = sub
        _floors(report, args.engines)
        print(f"{name} floor: {sub.get('floor')}", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))
    report["machine"].append(machine_rates())
    _floors(report, args.engines)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


def _summary(r: dict[str, Any]) -> str:
    if "step_median_s" not in r:
        return str(r.get("error", r))[-2000:]
    return (f"{r['step_engine']} fit {r['fit_s']:.1f}s, {r['n_steps']} steps, median step "
            f"{1e3 * r['step_median_s']:.1f} ms (mean {1e3 * r['step_mean_s']:.1f}), load "
            f"{r['load_before']}->{r['load_after']}, phases {({k: round(v, 2) for k, v in r['phases_s'].items()})}")


def markdown(report: dict[str, Any]) -> str:
    """The results table: per configuration and route, measured step, floor, ratio."""
    m = report["rates"]
    loads = ", ".join(f"{r['load_before']}" for r in report["machine"])
    head = (f"Machine (best of {len(report['machine'])} measurements, load at each: {loads}): "
            f"{m['1']['gflops']:.0f} / {m['2']['gflops']:.0f} GFLOP/s (1 / 2 threads), triad "
            f"{m['1']['triad_gbs']:.1f} / {m['2']['triad_gbs']:.1f} GB/s, copy {m['1']['copy_gbs']:.1f} / "
            f"{m['2']['copy_gbs']:.1f} GB/s, 1 KiB row gather {m['1']['gather_gbs']:.1f} / "
            f"{m['2']['gather_gbs']:.1f} GB/s.")
    lines = [head, "",
             "| subset | route | median step ms | floor ms (compute / memory) | step / floor | fit s | load |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for name, sub in report["subsets"].items():
        fl = sub.get("floor")
        for engine in ENGINES:
            r = sub.get(engine)
            if not r or "step_median_s" not in r:
                continue
            floor = (f"{1e3 * fl['floor_s']:.1f} ({1e3 * fl['compute_s']:.1f} / {1e3 * fl['memory_s']:.1f})"
                     if fl else "")
            ratio = f"{r['ratio_to_floor']:.1f}" if "ratio_to_floor" in r else ""
            lines.append(f"| {name} | {r['step_engine']} | {1e3 * r['step_median_s']:.1f} | {floor} | {ratio} | "
                         f"{r['fit_s']:.1f} | {r['load_before']} -> {r['load_after']} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_roofline", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subsets", default="person,artifact,nouns", type=lambda s: s.split(","))
    p.add_argument("--engines", default=",".join(ENGINES), type=lambda s: s.split(","))
    p.add_argument("--max-epochs", type=int, default=None, help="cap the epochs (default: the classifier's)")
    p.add_argument("--machine-only", action="store_true", help="measure the machine's rates and stop")
    p.add_argument("--rates", default=None,
                   help="JSON of earlier --machine-only measurements (one or a list): the floor uses the best rates")
    p.add_argument("--work", default=None, help="folder for the saved splits (default: a temporary one)")
    p.add_argument("--out", default=None, help="write the report as JSON here")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(Path(args.worker).read_text()))))
        return 0
    if args.machine_only:
        print(json.dumps(machine_rates(), indent=1))
        return 0
    report = run(args)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
