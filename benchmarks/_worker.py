"""Run one benchmark job in its own process: ``python -m benchmarks._worker JOB.json``.

A job fits one method on one saved data set and predicts its test split. Running each job in
a fresh process gives every method the same clean start, an exact peak-memory figure (the
process's resident-set high-water mark, ``ru_maxrss``), and lets the parent stop a job that
runs past its time budget without crashing the benchmark.

The job writes ``result.json`` (timings, memory, status) and ``pred.npy`` (node-id paths)
into its output folder; the parent scores the predictions.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rss_mib() -> float:
    """Current resident set size of this process in MiB (Linux ``/proc``)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def peak_rss_mib() -> float:
    """High-water mark of this process's resident set size in MiB.

    ``VmHWM`` of ``/proc/self/status`` where there is one: Linux carries ``ru_maxrss`` over
    ``fork`` + ``exec``, so a worker started by a benchmark holding gigabytes of TF-IDF data
    would report the parent's peak as its own (measured: 3.5 GB for a 0.7 GB worker).
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20


def _descendants(pid: int) -> list[int]:
    """Process ids of all descendants of ``pid`` (Linux ``/proc/PID/task/TID/children``)."""
    out: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except OSError:
                continue
            out.extend(kids)
            stack.extend(kids)
    return out


def _rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


class TreeRSSSampler:
    """Peak of the summed RSS of this process and all its descendants, sampled in a thread.

    HiClass trains in joblib worker processes, whose memory ``ru_maxrss`` of this process
    does not see; this sampler does (to within its sampling interval).
    """

    def __init__(self, interval: float = 0.05):
        import threading

        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        me = os.getpid()
        total = _rss_of(me) + sum(_rss_of(p) for p in _descendants(me))
        self.peak = max(self.peak, total)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> TreeRSSSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def peak_mib(self) -> float:
        return self.peak / 2**20


def load_split(folder: str | os.PathLike) -> dict[str, Any]:
    """Load a data set saved by ``bench_peers.save_split``."""
    import scipy.sparse

    folder = Path(folder)
    data: dict[str, Any] = {}
    for part in ("X_train", "X_test"):
        sparse = folder / f"{part}.sparse.npz"
        data[part] = scipy.sparse.load_npz(sparse).tocsr() if sparse.exists() else np.load(folder / f"{part}.npy")
    for part in ("y_train", "y_test", "parents"):
        data[part] = np.load(folder / f"{part}.npy")
    return data


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    # LogisticRegression's lbfgs often stops at max_iter on these data: the defaults are kept
    # on purpose (the peers are not tuned), and thousands of identical warnings help no one.
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    out = Path(job["out"])
    out.mkdir(parents=True, exist_ok=True)
    threads = job.get("threads")
    result: dict[str, Any] = {"method": job["method"], "status": "error"}
    try:
        if job["method"] != "noop" and threads:
            import torch

            torch.set_num_threads(int(threads))
        from hiclass_parallel import Tree

        from benchmarks._peers import make_method

        data = load_split(job["data"])
        tree = Tree.from_parents(data["parents"])
        if job["method"] == "epoch-overhead":
            from benchmarks._overhead import epoch_overhead

            result.update(epoch_overhead(tree, data, **job.get("params", {})))
            result["status"] = "ok"
            return result
        if job.get("warm_up", True):
            from benchmarks._peers import warm_up

            start = time.perf_counter()
            warm_up(job["method"], job.get("params"), n_features=data["X_train"].shape[1])
            result["warm_up_s"] = time.perf_counter() - start
        model = make_method(job["method"], tree, job.get("params"))
        result["load_before"] = os.getloadavg()[0]
        result["rss_before_mib"] = rss_mib()
        with TreeRSSSampler() as sampler:
            start = time.perf_counter()
            model.fit(data["X_train"], data["y_train"])
            result["fit_s"] = time.perf_counter() - start
            result["rss_after_fit_mib"] = rss_mib()
            start = time.perf_counter()
            pred = model.predict_paths(data["X_test"])
            result["predict_s"] = time.perf_counter() - start
        # Sampled peak of the process tree (joblib workers included) and the kernel's exact
        # high-water mark of this process alone; the larger is reported.
        result["load_after"] = os.getloadavg()[0]
        result["peak_rss_self_mib"] = peak_rss_mib()
        result["peak_rss_tree_mib"] = sampler.peak_mib
        result["peak_rss_mib"] = max(result["peak_rss_self_mib"], result["peak_rss_tree_mib"])
        np.save(out / "pred.npy", np.asarray(pred, dtype=np.int64))
        for extra in ("n_epochs_", "history_epochs_", "inner_fit_s_", "inner_predict_s_"):
            if hasattr(model, extra):
                result[extra] = getattr(model, extra)
        result["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised: one failure must not end the run
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_path = Path(argv[0])
    job = json.loads(job_path.read_text())
    result = run_job(job)
    Path(job["out"], "result.json").write_text(json.dumps(result, indent=2, default=float))
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
