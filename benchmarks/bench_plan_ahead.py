"""Planning ahead on and off, interleaved: the fit time of the default text model either way.

The fused step plans each batch (``ps_prepare``) before it runs it; with planning ahead
(``config_.plan_ahead``) the next batch is planned on a thread while the step runs. On shared
cores the load drifts over minutes, so the two settings are fitted alternately, in one process,
on the same data, ``--rounds`` times each (``HICLASS_PARALLEL_PLAN_AHEAD`` switches it), and
the load average is recorded beside every fit. Also reported per fit: the median training step
period (from one step's start to the next one's, everything of the loop included: a median is
less moved by a burst of another process's load than a total), the seconds spent planning
(``prepare``) and, with planning ahead, the seconds the steps still waited for their plan.

The data are a split written by ``benchmarks.bench_text`` (its ``--work`` folder, one
sub-folder per subset)::

    python -m benchmarks.bench_text --subsets person,artifact,nouns --methods hc-text --work /tmp/bt
    python -m benchmarks.bench_plan_ahead --work /tmp/bt --subsets person,artifact,nouns --rounds 3 \\
        --out benchmarks/results/bench_plan_ahead.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _period_timer() -> Any:
    from skorch.callbacks import Callback

    class Periods(Callback):
        """The start time of every training step."""

        def initialize(self) -> Any:
            self.starts_: list[float] = []
            return self

        def on_batch_begin(self, net: Any, batch: Any = None, training: bool = False, **kw: Any) -> None:
            if training:
                self.starts_.append(time.perf_counter())

        def on_epoch_begin(self, net: Any, **kw: Any) -> None:
            self.starts_.append(float("nan"))  # no period across epochs (validation, calibration)

    return Periods()


def _fit_once(tree: Any, data: dict[str, Any], ahead: bool, seed: int) -> dict[str, Any]:
    import numpy as np

    from hiclass_parallel import HierarchicalClassifier
    from hiclass_parallel.estimators.networks import _native_path_step as native
    from hiclass_parallel.estimators.networks import _plan_ahead

    os.environ["HICLASS_PARALLEL_PLAN_AHEAD"] = "1" if ahead else "0"
    spent = {"prepare_s": 0.0, "wait_s": 0.0}
    prepare, plan_for = native.PathLocalStep.prepare, _plan_ahead.PlanAhead.plan_for

    def timed_prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return prepare(self, *args, **kwargs)
        finally:
            spent["prepare_s"] += time.perf_counter() - start

    def timed_plan_for(self: Any, batch: Any) -> Any:
        start = time.perf_counter()
        try:
            return plan_for(self, batch)
        finally:
            spent["wait_s"] += time.perf_counter() - start

    native.PathLocalStep.prepare, _plan_ahead.PlanAhead.plan_for = timed_prepare, timed_plan_for
    try:
        load = os.getloadavg()[0]
        model = HierarchicalClassifier(tree, semantics="terminal", random_state=seed, callbacks=[_period_timer()])
        start = time.perf_counter()
        model.fit(data["X_train"], np.asarray(data["y_train"]))
        fit_s = time.perf_counter() - start
        starts = np.asarray(dict(model.net_.callbacks_)["Periods"].starts_)
        periods = np.diff(starts)
    finally:
        native.PathLocalStep.prepare, _plan_ahead.PlanAhead.plan_for = prepare, plan_for
    config = model.config_
    return {"plan_ahead": config.plan_ahead, "reason": config.plan_ahead_reason, "fit_s": fit_s,
            "step_period_ms": 1e3 * float(np.nanmedian(periods)), "steps": int(np.isfinite(periods).sum()),
            "load_before": load, "load_after": os.getloadavg()[0], "epochs": config.max_epochs, **spent}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import hiclass_parallel  # first: it sets OMP_WAIT_POLICY before torch loads

    import numpy as np
    import torch

    from benchmarks._worker import load_split
    from hiclass_parallel import Tree

    torch.set_num_threads(args.threads)
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "threads": args.threads,
                              "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                              "package": hiclass_parallel.__version__, "rounds": args.rounds, "subsets": {}}
    for name in args.subsets:
        data = load_split(Path(args.work) / name)
        tree = Tree.from_parents(data["parents"])
        _fit_once(tree, {"X_train": data["X_train"][:2048], "y_train": data["y_train"][:2048]}, True, args.seed)
        fits = []
        for r in range(args.rounds):
            for ahead in ((True, False) if r % 2 == 0 else (False, True)):
                fits.append(_fit_once(tree, data, ahead, args.seed))
                f = fits[-1]
                print(f"{name} round {r} plan_ahead={f['plan_ahead']}: fit {f['fit_s']:.2f}s step "
                      f"{f['step_period_ms']:.1f}ms prepare "
                      f"{f['prepare_s']:.2f}s waited {f['wait_s']:.2f}s load {f['load_before']:.1f}", flush=True)
        summary: dict[str, Any] = {"n_classes": tree.n_classes, "n_train": int(data["X_train"].shape[0]), "fits": fits}
        for key, flag in (("on", True), ("off", False)):
            mine = [f for f in fits if f["plan_ahead"] is flag]
            summary[f"median_fit_{key}_s"] = float(np.median([f["fit_s"] for f in mine]))
            summary[f"median_step_{key}_ms"] = float(np.median([f["step_period_ms"] for f in mine]))
        report["subsets"][name] = summary
        print(f"{name}: median fit {summary['median_fit_off_s']:.2f}s off, {summary['median_fit_on_s']:.2f}s on; "
              f"median step {summary['median_step_off_ms']:.1f}ms off, {summary['median_step_on_ms']:.1f}ms on",
              flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_plan_ahead", description=__doc__.split("\n")[0])
    p.add_argument("--work", required=True, help="bench_text's --work folder (one split per subset)")
    p.add_argument("--subsets", default="person,artifact,nouns")
    p.add_argument("--rounds", type=int, default=3, help="fits of each setting, alternated")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON report path")
    args = p.parse_args(argv)
    args.subsets = [s for s in args.subsets.split(",") if s]
    run(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
