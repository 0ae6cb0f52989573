"""LazyAdam's row update on a text model's input table: one second moment per entry or per row.

The update of the rows a step touches is memory-bound: per touched entry Adam reads the
parameter, both moments and the gradient and writes the three back (28 bytes); with one second
moment per row (``LazyAdam(second_moment="row")``, the classifier's default on the input layer of
:class:`~hiclass_parallel.estimators.SparseMLP`) it reads p, m, g and writes p, m (20 bytes),
and the state of a table is one float per row instead of one per entry.

This times the C update (``adam_rows``) on a table the size of WordNet's nouns input layer
(483,569 features x 256 units) for ``--rows`` distinct random rows per step (about what a
256-row batch of glosses touches), both forms side by side in one process, alternating, and
reports the median per step, the effective bandwidth, and the second moment's memory.

Usage::

    python -m benchmarks.bench_adam_rows --threads 2 --out benchmarks/results/bench_adam_rows.json
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
import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hiclass_parallel.estimators.networks._native_path_step import adam_rows, available  # noqa: E402

#: DRAM bytes per touched entry: p, m, v, g read and p, m, v written; without v: p, m, g and p, m.
BYTES = {"entry": 28, "row": 20}


def run(args: argparse.Namespace) -> dict[str, Any]:
    if not available():
        raise SystemExit("the C kernel is not built (python setup.py build_ext --inplace)")
    torch.set_num_threads(args.threads)
    N, H, n = args.table_rows, args.width, args.rows
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(N, H, generator=gen)
    m = torch.zeros(N, H)
    second = {"entry": torch.zeros(N, H), "row": torch.zeros(N, 1)}
    g = torch.randn(n, H, generator=gen)
    times: dict[str, list[float]] = {k: [] for k in second}
    rng = np.random.default_rng(0)
    load = [os.getloadavg()[0]]
    for step in range(args.steps):
        rows = torch.as_tensor(np.sort(rng.choice(N, n, replace=False)))
        for form in (("entry", "row") if step % 2 == 0 else ("row", "entry")):
            start = time.perf_counter()
            adam_rows(p, m, second[form], rows, g, lr_t=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
                      bias_correction2=0.5, threads=args.threads)
            times[form].append(time.perf_counter() - start)
    load.append(os.getloadavg()[0])
    out: dict[str, Any] = {"table": [N, H], "rows_per_step": n, "threads": args.threads, "steps": args.steps,
                           "load_average": load, "forms": {}}
    for form, ts in times.items():
        ms = float(np.median(ts[1:])) * 1e3  # the first call pages the state in
        out["forms"][form] = {"median_ms": ms, "bytes_per_entry": BYTES[form],
                              "effective_gb_s": BYTES[form] * n * H / (ms * 1e-3) / 1e9,
                              "second_moment_mib": second[form].numel() * 4 / 2**20}
    out["row_over_entry"] = out["forms"]["row"]["median_ms"] / out["forms"]["entry"]["median_ms"]
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_adam_rows", description=__doc__.split("\n\n")[0])
    p.add_argument("--table-rows", type=int, default=483_569, help="rows of the table (WordNet nouns' features)")
    p.add_argument("--width", type=int, default=256, help="its width (the hidden units)")
    p.add_argument("--rows", type=int, default=9_000, help="distinct rows touched per step")
    p.add_argument("--steps", type=int, default=41)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="write the report as JSON here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    report = run(args)
    for form, r in report["forms"].items():
        print(f"{form:5s}: {r['median_ms']:.2f} ms per step ({r['bytes_per_entry']} B per entry, "
              f"{r['effective_gb_s']:.1f} GB/s), second moment {r['second_moment_mib']:.1f} MiB")
    print(f"row / entry: {report['row_over_entry']:.2f} (load average {report['load_average']})")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
