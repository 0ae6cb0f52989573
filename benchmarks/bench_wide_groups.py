"""Wide sibling groups: the demo's fits with the sampled softmax (``softmax_sample``) and without.

The tasks of ``hiclass-parallel demo`` (its pipeline, split and seed: TF-IDF into the
classifier's defaults with ``semantics="terminal"``, 20% of the synsets held out, seed 0): the
full WordNet tree (``--full-tree``: 117,659 classes, no common root, so one top-level group of
about 22,000 classes that every row trains on) and all nouns (82,115 classes, the widest group
well under the default limit, so its fit does not change). Each ``--settings`` entry is a
``softmax_sample`` value (``none``: every softmax exact; ``auto``: the default; an integer);
the fits of one task alternate between the settings ``--repeat`` times, so a change in the
machine's load falls on all of them.

One JSON record per fit: fit seconds (wall, and the process's CPU seconds, all its threads:
less sensitive to other processes on the cores; ``train_seconds`` the epochs' own, without
the features, calibration and prototypes), held-out hF1 and exact path accuracy, the configuration's
``softmax_sample`` and its reason, the load average before and after; the whole run is written
to ``--out`` (with the command, date and ``uptime``).

Usage::

    python -m benchmarks.bench_wide_groups --tasks full,nouns --settings none,auto --epochs 2 \\
        --out benchmarks/results/bench_wide_groups.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load(task: str, seed: int = 0) -> dict:
    """The demo's data and split for ``task`` (``"full"`` or ``"nouns"``)."""
    from sklearn.model_selection import train_test_split

    from hiclass_parallel.datasets import load_wordnet_glosses
    from hiclass_parallel.ops.sibling_paths import sibling_plan

    data = load_wordnet_glosses(None, pos=None if task == "full" else "n", include_lemmas=True)
    X_train, X_test, y_train, y_test = train_test_split(data.data, data.target, test_size=0.2, random_state=seed)
    widths = np.diff(sibling_plan(data.tree, True).group_ptr)
    return {"tree": data.tree, "X_train": X_train, "X_test": X_test, "y_train": y_train, "y_test": y_test,
            "widest_group": int(widths.max())}


def fit_once(task: dict, setting: str, epochs: int | None, seed: int = 0) -> dict:
    """One fit of the demo's pipeline with ``softmax_sample`` set from ``setting``."""
    from hiclass_parallel.demo import build_demo_pipeline
    from hiclass_parallel.metrics import exact_path_accuracy_score, hierarchical_f1_score

    value = None if setting == "none" else ("auto" if setting == "auto" else int(setting))
    pipe = build_demo_pipeline(task["tree"], epochs=epochs, seed=seed, verbose=False)
    pipe.set_params(clf__softmax_sample=value)
    load_before = os.getloadavg()[0]
    start, cpu_start = time.perf_counter(), time.process_time()
    pipe.fit(task["X_train"], task["y_train"])
    fit_seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    pred = pipe.predict(task["X_test"])
    clf = pipe.named_steps["clf"]
    return {
        "softmax_sample": setting, "fit_seconds": round(fit_seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
        "epochs": len(clf.net_.history), "train_seconds": round(sum(clf.net_.history[:, "dur"]), 2),
        "hierarchical_f1": round(float(hierarchical_f1_score(task["y_test"], pred, tree=task["tree"])), 4),
        "exact_path_accuracy": round(float(exact_path_accuracy_score(task["y_test"], pred, tree=task["tree"])), 4),
        "config_softmax_sample": clf.config_.softmax_sample, "reason": clf.config_.softmax_sample_reason,
        "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="full,nouns", help="comma separated: full, nouns")
    parser.add_argument("--settings", default="none,auto", help="comma separated softmax_sample values")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: the classifier's)")
    parser.add_argument("--repeat", type=int, default=1, help="fits per setting, alternating")
    parser.add_argument("--out", default=None, help="JSON file for the run")
    args = parser.parse_args(argv)
    run = {"command": "python -m benchmarks.bench_wide_groups " + " ".join(argv if argv is not None else sys.argv[1:]),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
           "cpus": os.cpu_count(), "tasks": {}}
    for name in args.tasks.split(","):
        task = load(name)
        fits = []
        for _ in range(args.repeat):
            for setting in args.settings.split(","):
                record = fit_once(task, setting, args.epochs)
                print(json.dumps({"task": name, **record}), flush=True)
                fits.append(record)
        run["tasks"][name] = {"n_classes": task["tree"].n_classes, "n_train": len(task["X_train"]),
                              "widest_group": task["widest_group"], "fits": fits}
    run["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(run, indent=1) + "\n")
    return run


if __name__ == "__main__":
    main()
