"""Reproduce the paper's memory table (Heinsen 2022, Table 2) on the WordNet 3.0 tree, with times.

For a batch of 100 float32 score vectors and 100 labels on the 117,659-class, 20-level WordNet
tree (:func:`hiclass_parallel.datasets.load_wordnet_tree`), per array backend (torch CPU,
NumPy, and torch CUDA / CuPy when a GPU is present) this reports:

- each object of the paper's table: shape, dtype and size (MiB, which the paper calls MB);
- the fixed memory of the library: the tree buffers it keeps on the device (every array
  cached on the tree for that backend and device after both operations ran);
- median times of :func:`~hiclass_parallel.partition_scores` with a fresh output and with
  ``out=``, of :func:`~hiclass_parallel.labels_to_paths`, and of a plain fill of a buffer of
  the output's size (the memory-bandwidth floor: no method that writes the output can beat
  it), plus a fresh ``full`` of that size (what allocating a new output costs by itself);
- the targets: tree buffers <= 12 MB; ``partition_scores`` with ``out=`` within 2x of
  the plain fill and with a fresh output within 3x; ``labels_to_paths`` under 1 ms on CPU.

Operations are timed round-robin (one call of each per round), so a machine shared with
other work slows all of them alike and the ratios stay meaningful; medians over the rounds.

Usage::

    python -m benchmarks.bench_paper_table            # 15 rounds, about a minute on 2 cores
    python -m benchmarks.bench_paper_table --quick    # 3 rounds
    python benchmarks/bench_paper_table.py --backends torch-cpu --json /tmp/table.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hiclass_parallel import labels_to_paths, partition_scores  # noqa: E402
from hiclass_parallel.datasets import load_wordnet_tree  # noqa: E402

MIB = 2**20
TARGETS = {"buffers_mb": 12.0, "out_vs_fill": 2.0, "fresh_vs_fill": 3.0, "labels_cpu_ms": 1.0}
PAPER = {  # the paper's Table 2 (MB there are MiB: 100 x 117,659 float32 = 44.9)
    "scores": 44.9, "labels": 0.0, "partitioned": 897.7, "paths": 0.0, "data": 942.6, "library": 40.0,
}


# --------------------------------------------------------------------------- backends
class Backend:
    """Arrays and synchronisation for one (library, device)."""

    def __init__(self, name: str):
        self.name = name
        self.lib, _, self.device = name.partition("-")
        if self.lib == "torch":
            import torch

            self.torch = torch
        elif self.lib == "cupy":
            import cupy

            self.cupy = cupy

    @staticmethod
    def available(name: str) -> str | None:
        """None if ``name`` can run here, else the reason it cannot."""
        if name == "numpy-cpu":
            return None
        if name.startswith("torch-"):
            try:
                import torch
            except ImportError:
                return "torch is not installed"
            if name == "torch-cuda" and not torch.cuda.is_available():
                return "torch sees no CUDA device"
            return None
        if name == "cupy-cuda":
            try:
                import cupy

                cupy.cuda.runtime.getDeviceCount()
            except Exception as exc:  # ImportError, or CUDA errors without a device
                return f"cupy unavailable ({type(exc).__name__})"
            return None
        return f"unknown backend {name!r}"

    def asarray(self, host: np.ndarray) -> Any:
        if self.lib == "numpy":
            return host
        if self.lib == "torch":
            return self.torch.asarray(host, device=self.device)
        return self.cupy.asarray(host)

    def empty(self, shape: tuple[int, ...], like: Any) -> Any:
        if self.lib == "numpy":
            return np.empty(shape, dtype=like.dtype)
        if self.lib == "torch":
            return self.torch.empty(shape, dtype=like.dtype, device=like.device)
        return self.cupy.empty(shape, dtype=like.dtype)

    def fill(self, array: Any, value: float) -> None:
        if self.lib == "torch":
            array.fill_(value)
        else:
            array.fill(value)

    def full(self, shape: tuple[int, ...], value: float, like: Any) -> Any:
        if self.lib == "numpy":
            return np.full(shape, value, dtype=like.dtype)
        if self.lib == "torch":
            return self.torch.full(shape, value, dtype=like.dtype, device=like.device)
        return self.cupy.full(shape, value, dtype=like.dtype)

    def sync(self) -> None:
        if self.name == "torch-cuda":
            self.torch.cuda.synchronize()
        elif self.lib == "cupy":
            self.cupy.cuda.get_current_stream().synchronize()

    def threads(self) -> str:
        if self.lib == "torch" and self.device == "cpu":
            return f"{self.torch.get_num_threads()} threads"
        if self.lib == "numpy":
            return "1 thread"
        return "GPU"

    def device_name(self) -> str:
        if self.name == "torch-cuda":
            return self.torch.cuda.get_device_name()
        if self.lib == "cupy":
            return self.cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        return _cpu_name()


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


# --------------------------------------------------------------------------- measuring
def _timed_rounds(ops: dict[str, Callable[[], Any]], backend: Backend, rounds: int) -> dict[str, list[float]]:
    """Seconds of each op, one call of each per round (after one warm-up call each)."""
    for op in ops.values():
        result = op()
        backend.sync()
        del result
    times: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(rounds):
        for name, op in ops.items():
            backend.sync()
            start = time.perf_counter()
            result = op()
            backend.sync()
            times[name].append(time.perf_counter() - start)
            del result  # a fresh output is freed outside the timing
    return times


def _buffers(tree: Any, like: Any) -> dict[str, int]:
    """Bytes of each tree buffer cached for the namespace and device of ``like``."""
    from hiclass_parallel._backend import array_namespace, device

    xp, dev = array_namespace(like).__name__, str(device(like))
    out: dict[str, int] = {}
    for key, buf in tree._device_cache.items():
        # Keys name their owner module, the namespace and device, and the buffer (and dtype).
        if xp in key and dev in key and hasattr(buf, "nbytes"):
            name = " ".join(str(k) for k in key if k not in (xp, dev, "None") and not str(k).startswith("hiclass_parallel"))
            out[name] = int(buf.nbytes)
    return out


def run_backend(name: str, tree: Any, batch: int, rounds: int, seed: int) -> dict[str, Any]:
    """All figures for one backend."""
    backend = Backend(name)
    rng = np.random.default_rng(seed)
    C, L = tree.n_classes, tree.n_levels
    scores = backend.asarray(rng.standard_normal((batch, C), dtype=np.float32))
    labels = backend.asarray(rng.integers(0, C, size=batch, dtype=np.int64))
    out = backend.empty((batch, L, C), scores)
    backend.fill(out, 0.0)  # fault the buffer in before timing anything

    # First calls build the device buffers; results are checked against the paper's definition.
    partitioned = partition_scores(scores, tree)
    paths = labels_to_paths(labels, tree)
    backend.sync()
    _check(partitioned, paths, scores, labels, tree)
    objects = {
        "scores": _describe("Scores y_bc (given)", scores),
        "labels": _describe("Labels y_b (given)", labels),
        "partitioned": _describe("Scores y_blc (transformed)", partitioned),
        "paths": _describe("Labels y_bl (transformed)", paths),
    }
    del partitioned, paths
    buffers = _buffers(tree, scores)

    ops = {
        "fill": lambda: backend.fill(out, 0.0),
        "partition_scores(out=)": lambda: partition_scores(scores, tree, out=out),
        "partition_scores (fresh)": lambda: partition_scores(scores, tree),
        "full (fresh)": lambda: backend.full((batch, L, C), -math.inf, scores),
        "labels_to_paths": lambda: labels_to_paths(labels, tree),
    }
    times = _timed_rounds(ops, backend, rounds)
    # In the rounds, labels_to_paths runs right after ~1 GB of writes have flushed every CPU
    # cache (the interpreter's included): "cold". Alone in a loop it runs "warm".
    times["labels_to_paths (cold)"] = times.pop("labels_to_paths")
    times["labels_to_paths (warm)"] = _timed_rounds({"warm": ops["labels_to_paths"]}, backend, 20 * rounds)["warm"]
    median_ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    fill = median_ms["fill"]
    return {
        "backend": name,
        "device": backend.device_name(),
        "threads": backend.threads(),
        "objects": objects,
        "buffers": buffers,
        "buffers_bytes": sum(buffers.values()),
        "median_ms": median_ms,
        "all_ms": {k: [t * 1e3 for t in v] for k, v in times.items()},
        "fill_gb_s": objects["partitioned"]["bytes"] / (fill / 1e3) / 1e9,
        "ratios": {
            "out_vs_fill": median_ms["partition_scores(out=)"] / fill,
            "fresh_vs_fill": median_ms["partition_scores (fresh)"] / fill,
        },
    }


def _describe(title: str, array: Any) -> dict[str, Any]:
    nbytes = int(array.nbytes)
    dtype = str(array.dtype).replace("torch.", "")
    return {"title": title, "shape": list(array.shape), "dtype": dtype, "bytes": nbytes, "mib": nbytes / MIB}


def _check(partitioned: Any, paths: Any, scores: Any, labels: Any, tree: Any) -> None:
    """Spot-check the outputs against the paper's equations on the host (one row)."""
    from hiclass_parallel._backend import to_numpy

    row, s = to_numpy(partitioned[0]), to_numpy(scores[0])
    expected = np.where(tree.mask, np.float32(-np.inf), s[None, :])
    if not np.array_equal(row, expected):
        raise AssertionError("partition_scores disagrees with the paper's masked fill")
    if not np.array_equal(to_numpy(paths), tree.paths[to_numpy(labels)]):
        raise AssertionError("labels_to_paths disagrees with the paper's gather")


# --------------------------------------------------------------------------- report
def _fmt_shape(shape: list[int]) -> str:
    return " x ".join(str(n) for n in shape)


def report(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The markdown report of all backends."""
    lines = [
        f"WordNet 3.0 tree: {meta['n_classes']:,} classes, {meta['n_levels']} levels "
        f"(load_wordnet_tree: {meta['load_ms']:.0f} ms in this process); batch {meta['batch']}; "
        f"{meta['rounds']} rounds; median times.",
        f"Machine: {meta['cpu']}; Python {meta['python']}, NumPy {meta['numpy']}, torch {meta['torch']}; "
        f"load average at start {meta['loadavg_start']}, at end {meta['loadavg_end']}.",
        "",
    ]
    first = results[0]
    lines += [
        "| Object | Shape | Type | MiB (paper's MB) | paper |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for key in ("scores", "labels", "partitioned", "paths"):
        obj = first["objects"][key]
        lines.append(f"| {obj['title']} | {_fmt_shape(obj['shape'])} | {obj['dtype']} | {obj['mib']:.1f} | {PAPER[key]:.1f} |")
    data_mib = sum(first["objects"][k]["mib"] for k in ("scores", "labels", "partitioned", "paths"))
    lines.append(f"| Total for data | -- | -- | {data_mib:.1f} | {PAPER['data']:.1f} |")
    for res in results:
        mib = res["buffers_bytes"] / MIB
        parts = ", ".join(f"{k} {v / MIB:.2f}" for k, v in res["buffers"].items())
        lines.append(f"| Library, {res['backend']}: tree buffers ({parts}) | -- | -- | {mib:.1f} | {PAPER['library']:.1f} |")
    lines.append("")

    ops = list(first["median_ms"])
    lines.append("| Backend | device | " + " | ".join(f"{op} ms" for op in ops) + " | fill GB/s |")
    lines.append("| --- | --- | " + " | ".join("---:" for _ in ops) + " | ---: |")
    for res in results:
        cells = " | ".join(f"{res['median_ms'][op]:.3f}" if res["median_ms"][op] < 10 else f"{res['median_ms'][op]:.0f}" for op in ops)
        lines.append(f"| {res['backend']} | {res['device']}, {res['threads']} | {cells} | {res['fill_gb_s']:.1f} |")
    lines.append("")

    lines += ["| Target | " + " | ".join(r["backend"] for r in results) + " |",
              "| --- | " + " | ".join("---" for _ in results) + " |"]

    def verdict(ok: bool) -> str:
        return "**met**" if ok else "**missed**"

    row = [f"{r['buffers_bytes'] / 1e6:.2f} MB {verdict(r['buffers_bytes'] / 1e6 <= TARGETS['buffers_mb'])}" for r in results]
    lines.append(f"| tree buffers <= {TARGETS['buffers_mb']:.0f} MB (paper: 40) | " + " | ".join(row) + " |")
    row = [f"{r['ratios']['out_vs_fill']:.2f}x {verdict(r['ratios']['out_vs_fill'] <= TARGETS['out_vs_fill'])}" for r in results]
    lines.append(f"| partition_scores(out=) / fill <= {TARGETS['out_vs_fill']:.0f}x | " + " | ".join(row) + " |")
    row = [f"{r['ratios']['fresh_vs_fill']:.2f}x {verdict(r['ratios']['fresh_vs_fill'] <= TARGETS['fresh_vs_fill'])}" for r in results]
    lines.append(f"| partition_scores fresh / fill <= {TARGETS['fresh_vs_fill']:.0f}x | " + " | ".join(row) + " |")
    row = []
    for r in results:
        cold, warm = r["median_ms"]["labels_to_paths (cold)"], r["median_ms"]["labels_to_paths (warm)"]
        text = f"{cold:.3f} ms cold, {warm:.3f} ms warm"
        row.append(f"{text} {verdict(cold < TARGETS['labels_cpu_ms'])}" if r["backend"].endswith("cpu") else text)
    lines.append(f"| labels_to_paths < {TARGETS['labels_cpu_ms']:.0f} ms on CPU | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of --rounds")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--batch", type=int, default=100, help="batch size (default 100, the paper's)")
    parser.add_argument("--backends", default="torch-cpu,numpy-cpu,torch-cuda,cupy-cuda",
                        help="comma separated; those unavailable here are skipped with the reason")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    rounds = 3 if args.quick else args.rounds

    loadavg_start = _loadavg()
    start = time.perf_counter()
    tree = load_wordnet_tree()
    load_ms = (time.perf_counter() - start) * 1e3
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)

    results, skipped = [], {}
    for name in [b.strip() for b in args.backends.split(",") if b.strip()]:
        reason = Backend.available(name)
        if reason is not None:
            skipped[name] = reason
            continue
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        results.append(run_backend(name, tree, args.batch, rounds, args.seed))
    if not results:
        print("no backend available: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()), file=sys.stderr)
        return 1
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    meta = {
        "n_classes": tree.n_classes, "n_levels": tree.n_levels, "batch": args.batch, "rounds": rounds,
        "load_ms": load_ms, "cpu": _cpu_name(), "python": platform.python_version(), "numpy": np.__version__,
        "torch": torch_version, "loadavg_start": loadavg_start, "loadavg_end": _loadavg(), "skipped": skipped,
    }
    text = report(results, meta)
    if skipped:
        text += "\nSkipped: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()) + "\n"
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return 0


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


if __name__ == "__main__":
    raise SystemExit(main())
