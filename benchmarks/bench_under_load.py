"""Training on shared cores: a default fit idle and beside one other busy process.

A user's machine is rarely idle. This benchmark runs, each in a fresh process:

- ``fit``: the defaults, ``HierarchicalClassifier(tree, semantics="terminal", random_state=0)``,
  on WordNet glosses (``benchmarks.bench_text.make_text``; person.n.01 by default), after a toy
  fit that pays the process's one-time costs; and ``LinearSVC()`` on the same features, the
  flat model a user would compare with;
- ``grid``: ``GridSearchCV`` of the defaults over 4 learning rates, 2 folds, on a small subset
  (animal.n.01), with ``n_jobs=1`` and ``n_jobs=2`` (joblib's default loky backend);

each either on a machine as idle as it gets or beside a ``busy`` process: a torch matrix-product
loop on 2 threads, started before and stopped after each run, the same for every condition
(as a user's other numeric job would be: no thread settings of its own). Every fit runs with
the environment a user has (``user``: ``OMP_WAIT_POLICY`` unset, the package imported before
torch, so the package's own choice applies; ``torch-first``: unset, torch imported first, so
libgomp's default applies: spin about 3 ms after each parallel region, then sleep) and, for
comparison, with ``OMP_WAIT_POLICY`` forced to ``PASSIVE`` (threads sleep while they wait) and
to ``ACTIVE`` (threads spin while they wait).

Reported: seconds, the ratio busy / idle per condition, ``os.getloadavg()`` before and after
every run. The machine is shared with other jobs: the load average says how idle "idle" was.

Usage::

    python -m benchmarks.bench_under_load --parts fit,grid --out benchmarks/results/bench_under_load.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
#: The busy neighbour: products of 1024 x 1024 matrices on 2 threads, forever.
BUSY = ("import torch\ntorch.set_num_threads(2)\na = torch.randn(1024, 1024)\nb = torch.empty(1024, 1024)\n"
        "while True:\n    torch.mm(a, a, out=b)\n")
#: OMP_WAIT_POLICY per condition: None leaves the variable unset (a user's environment);
#: "torch-first" leaves it unset too, and the fit's process imports torch before the package.
POLICIES = {"user": None, "torch-first": None, "passive": "PASSIVE", "active": "ACTIVE"}
LRS = [0.0025, 0.005, 0.01, 0.02]


def _load() -> float:
    return round(os.getloadavg()[0], 2)


# ---------------------------------------------------------------------------- jobs (in a worker)
def job_fit(job: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from benchmarks._text_methods import warm_up
    from benchmarks._worker import load_split
    from hiclass_parallel import HierarchicalClassifier, Tree

    data = load_split(job["data"])
    tree = Tree.from_parents(data["parents"])
    if job.get("threads"):
        import torch

        torch.set_num_threads(int(job["threads"]))
    if job["model"] == "linear-svc":
        from sklearn.svm import LinearSVC

        model: Any = LinearSVC()
    else:
        warm_up("hc-text", None, n_features=64)
        model = HierarchicalClassifier(tree, semantics="terminal", random_state=0)
    out: dict[str, Any] = {"load_before": _load()}
    start = time.perf_counter()
    model.fit(data["X_train"], np.asarray(data["y_train"]))
    out["fit_s"] = time.perf_counter() - start
    out["load_after"] = _load()
    out["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY")
    if hasattr(model, "net_"):
        import torch

        out.update(threads=torch.get_num_threads(), epochs=len(model.net_.history),
                   step_engine=getattr(model.net_, "step_engine_", None))
    return out


def job_grid(job: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    from sklearn.model_selection import GridSearchCV, KFold

    from benchmarks._text_methods import warm_up
    from benchmarks._worker import load_split
    from hiclass_parallel import HierarchicalClassifier, Tree

    data = load_split(job["data"])
    tree = Tree.from_parents(data["parents"])
    warm_up("hc-text", None, n_features=64)
    grid = GridSearchCV(HierarchicalClassifier(tree, semantics="terminal", random_state=0), {"lr": LRS},
                        cv=KFold(2, shuffle=True, random_state=0), n_jobs=job["n_jobs"], refit=False)
    out: dict[str, Any] = {"load_before": _load()}
    start = time.perf_counter()
    grid.fit(data["X_train"], np.asarray(data["y_train"]))
    out["fit_s"] = time.perf_counter() - start
    out["load_after"] = _load()
    out["mean_fit_time"] = [float(v) for v in grid.cv_results_["mean_fit_time"]]
    out["best_lr"] = float(grid.best_params_["lr"])
    return out


JOBS = {"fit": job_fit, "grid": job_grid}


# ---------------------------------------------------------------------------- running
class Busy:
    """The busy neighbour process (started and stopped by its own pid)."""

    def __init__(self, on: bool):
        self.on, self.proc = on, None

    def __enter__(self) -> Busy:  # noqa: PYI034 - a final class's own instance
        if self.on:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "MKL_", "HICLASS_"))}
            self.proc = subprocess.Popen([sys.executable, "-c", BUSY], env=env)
            time.sleep(3.0)  # torch imported, the loop running
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def run_job(job: dict[str, Any], policy: str | None, busy: bool, work: Path) -> dict[str, Any]:
    path = work / "job.json"
    path.write_text(json.dumps(job))
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    with Busy(busy):
        proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_under_load", "--worker", str(path)],
                              check=False, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"status": "error", "error": proc.stderr[-3000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def split_folder(name: str, work: Path) -> Path:
    """The gloss subset ``name`` (``bench_text.SUBSETS``) saved for the workers under ``work``
    (``bench_peers.save_split``; reused when already there), its description in ``info.json``."""
    from benchmarks.bench_peers import save_split
    from benchmarks.bench_text import SUBSETS, make_text

    folder = work / name
    if not (folder / "info.json").exists():
        info = save_split(make_text(SUBSETS[name], 0), folder)
        (folder / "info.json").write_text(json.dumps(info))
    return folder


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_under_load_"))
    report: dict[str, Any] = {"cpus": os.cpu_count(), "load_at_start": _load(), "runs": []}

    def record(entry: dict[str, Any]) -> None:
        report["runs"].append(entry)
        print(json.dumps(entry), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))

    for _ in range(args.repeats):
        if "fit" in args.parts:
            data = str(split_folder(args.subset, work))
            for model in args.models:
                for policy in args.policies if model == "hc" else ["user"]:
                    for threads in args.threads if model == "hc" else [0]:
                        for busy in (False, True):
                            job = {"job": "fit", "data": data, "model": model, "threads": threads,
                                   "torch_first": policy == "torch-first"}
                            r = run_job(job, POLICIES[policy], busy, work)
                            record({"part": "fit", "subset": args.subset, "model": model, "policy": policy,
                                    "set_threads": threads, "busy": busy, **r})
        if "grid" in args.parts:
            data = str(split_folder(args.grid_subset, work))
            for busy in args.grid_busy:
                for n_jobs in (1, 2):
                    r = run_job({"job": "grid", "data": data, "n_jobs": n_jobs}, None, busy, work)
                    record({"part": "grid", "subset": args.grid_subset, "n_jobs": n_jobs, "busy": busy, **r})
    report["load_at_end"] = _load()
    return report


def markdown(report: dict[str, Any]) -> str:
    """Busy / idle per condition (the first idle and busy runs of each), and the grid search."""
    lines = ["| run | idle s (load) | busy s (load) | busy / idle |", "| --- | ---: | ---: | ---: |"]
    seen: dict[tuple, dict[bool, dict]] = {}
    for r in report["runs"]:
        what = r.get("model", f"n_jobs={r.get('n_jobs')}") + (f" threads={r['set_threads']}" if r.get("set_threads") else "")
        key = (r["part"], what, r.get("policy", "user"))
        seen.setdefault(key, {}).setdefault(r["busy"], r)
    for (part, what, policy), pair in seen.items():
        cells = []
        for busy in (False, True):
            r = pair.get(busy, {})
            cells.append(f"{r['fit_s']:.1f} ({r['load_before']})" if "fit_s" in r else "")
        ratio = (f"{pair[True]['fit_s'] / pair[False]['fit_s']:.2f}"
                 if all("fit_s" in pair.get(b, {}) for b in (False, True)) else "")
        lines.append(f"| {part} {what} OMP_WAIT_POLICY={policy} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_under_load", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    split = lambda s: [v for v in s.split(",") if v]
    p.add_argument("--parts", default="fit,grid", type=split)
    p.add_argument("--subset", default="person")
    p.add_argument("--models", default="hc,linear-svc", type=split)
    p.add_argument("--policies", default="user,torch-first,passive,active", type=split, help=f"of {sorted(POLICIES)}")
    p.add_argument("--threads", default="0", type=lambda s: [int(v) for v in split(s)],
                   help="torch.set_num_threads before the fit (0: leave it)")
    p.add_argument("--grid-subset", default="animal")
    p.add_argument("--grid-busy", default="0", type=lambda s: [v == "1" for v in split(s)],
                   help="grid runs idle (0), busy (1) or both (0,1)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--work", default=None, help="folder for the saved splits (default: a temporary one)")
    p.add_argument("--out", default=None)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        job = json.loads(Path(args.worker).read_text())
        if job.get("torch_first"):
            import torch  # noqa: F401 - loaded before the package, as a user's script may

        print(json.dumps(JOBS[job["job"]](job)))
        return 0
    print(markdown(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
