"""The text route's CPU fit at several thread counts, beside libpecos XR-Linear at the same counts.

All nouns (or another subset of :mod:`benchmarks.bench_text`) is encoded once; then for each
thread count both methods fit and predict in fresh worker processes
(:func:`benchmarks.bench_peers.run_worker`): ``hc-text`` with ``torch.set_num_threads(n)``,
XR-Linear with ``threads=n`` for its indexer, its training and its prediction. Reported per
count: fit and predict seconds, hF1 and exact accuracy, the load average before each fit, and
the ratio of the two fits measured in the same run.

XR-Linear runs only where ``PECOS_PYTHON`` names a python with libpecos (see
:mod:`benchmarks._pecos_job`); otherwise the report says why it was skipped.

Usage::

    python -m benchmarks.bench_cpu_threads --subset nouns --threads 1,2,4,8,16 --out threads.json
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

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from benchmarks._text_methods import unavailable_reason
    from benchmarks.bench_peers import environment, run_worker, save_split
    from benchmarks.bench_text import SUBSETS, make_text, score_text

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_cpu_threads", description=__doc__.split("\n\n")[0])
    p.add_argument("--subset", default="nouns", help=f"one of {sorted(SUBSETS)}")
    p.add_argument("--threads", default="1,2,4,8,16")
    p.add_argument("--methods", default="hc-text,xr-linear")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget", type=float, default=600.0, help="seconds per fit + predict")
    p.add_argument("--work", default="/tmp/bench_cpu_threads")
    p.add_argument("--out", default=None, help="JSON report path")
    args = p.parse_args(argv)

    counts = [int(t) for t in args.threads.split(",")]
    start = time.perf_counter()
    data = make_text(SUBSETS[args.subset], args.seed)
    folder = Path(args.work) / args.subset
    info = save_split(data, folder)
    info["encode_s"] = time.perf_counter() - start
    report: dict[str, Any] = {"environment": environment(max(counts)), "subset": args.subset, "info": info,
                              "runs": []}
    print(f"{args.subset}: {info['n_nodes']} classes, {info['n_train']} train rows, encoded in "
          f"{info['encode_s']:.1f} s", flush=True)
    for n in counts:
        row: dict[str, Any] = {"threads": n}
        for method in args.methods.split(","):
            reason = unavailable_reason(method)
            if reason:
                row[method] = {"status": "skipped", "reason": reason}
                continue
            params: dict[str, Any] = {"random_state": args.seed} if method.startswith("hc-") else \
                {"indexer": {"threads": n}, "train": {"threads": n}}
            job = {"method": method, "data": str(folder), "out": str(folder / f"{method}-{n}"), "params": params,
                   "threads": n}
            result = run_worker(job, args.budget, 60.0, sys.stdout)
            if result.get("status") == "ok":
                pred = np.load(folder / f"{method}-{n}" / "pred.npy")
                result.update(score_text(data["tree"], data["y_train"], data["y_test"], pred))
                for key in ("fit_s", "predict_s"):
                    if f"inner_{key}_" in result:  # external process: its own timing, without start-up
                        result[key] = result[f"inner_{key}_"]
                print(f"  {n:>2} threads {method}: fit {result['fit_s']:.2f} s, predict {result['predict_s']:.2f} s, "
                      f"hF1 {result['hf1']:.3f}, exact {result['exact']:.3f}, load {result.get('load_before', 0):.1f}",
                      flush=True)
            else:
                print(f"  {n:>2} threads {method}: {result.get('status')} {str(result.get('error', ''))[:300]}",
                      flush=True)
            row[method] = result
        ours, peer = row.get("hc-text", {}), row.get("xr-linear", {})
        if ours.get("status") == "ok" and peer.get("status") == "ok":
            row["fit_ratio_hc_to_xr"] = ours["fit_s"] / peer["fit_s"]
        report["runs"].append(row)
        report["environment"]["load_average_end"] = os.getloadavg()
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(report, indent=1, default=float))
    return report


if __name__ == "__main__":
    main()
