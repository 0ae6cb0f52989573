"""Best-first vs exhaustive decoding of a trained text model, at WordNet's scale.

The target: prediction with the sibling partition at least 5x faster than scoring every
class, with identical paths, at all nouns. This fits the classifier with its defaults
(``HierarchicalClassifier(tree, semantics="terminal")`` on the TF-IDF of
:mod:`benchmarks.bench_text`), then decodes the held-out rows both ways, batch by batch:

- best-first: the hidden rows, then :func:`hiclass_parallel.ops.best_first.best_first_paths`
  scoring only the children of expanded nodes (what ``predict`` does: on the CPU the C search
  of :mod:`hiclass_parallel.ops.engine._native_best_first` when it was built);
- best-first through the batched torch search (a plain score function, the route of GPUs and
  of machines without the C search), for comparison;
- exhaustive: every score (``h @ W.T + b``, all classes and stops), then ``best_paths``.

It reports the times (the encoder's time is counted in each, and also reported alone), the
ratios, the columns scored per row, the rows that fell back to the exhaustive route, and
whether every path is identical.

Usage: ``python -m benchmarks.bench_decode [--root person.n.01] [--out benchmarks/results/bench_decode.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    import torch

    from benchmarks.bench_text import make_text
    from hiclass_parallel import Tree
    from hiclass_parallel.estimators import HierarchicalClassifier
    from hiclass_parallel.ops import best_paths
    from hiclass_parallel.ops.best_first import best_first_paths

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_decode")
    p.add_argument("--root", default=None, help="synset of the subtree (default: all nouns)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="e.g. cuda")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = make_text(args.root)
    tree = Tree.from_parents(data["tree"].parents)
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=0, batch_size=args.batch_size,
                                 device=args.device)
    start = time.perf_counter()
    clf.fit(data["X_train"], data["y_train"])
    fit_s = time.perf_counter() - start
    X = data["X_test"]
    module = clf.net_.module_

    def hidden_batches():
        # what predict runs: the module's hidden representation, one mini-batch at a time
        yield from clf.net_.outputs(clf._dataset(X), hidden=True)

    report = {"root": args.root or "all nouns", "device": args.device, "n_classes": tree.n_classes, "n_outputs": clf.n_scores_,
              "n_test": X.shape[0], "fit_s": fit_s, "batch_size": args.batch_size, "threads": args.threads,
              "load_average_start": os.getloadavg()[0]}
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    def best_first(plain: bool) -> tuple[float, list, list]:
        start = time.perf_counter()
        fast, works = [], []
        with torch.no_grad():
            for h in hidden_batches():
                scorer = module.scorer(h)
                if plain:  # no linear_parts(): the batched torch search
                    scorer = (lambda s: lambda rows, cols: s(rows, cols))(scorer)
                paths, _, work = best_first_paths(scorer, h.shape[0], tree, stop=True,
                                                  semantics="terminal", like=h, return_work=True)
                fast.append(paths)
                works.append(work)
        sync()
        return time.perf_counter() - start, fast, works

    for repeat in range(2):  # the first pass warms caches and allocator; the second is reported
        start = time.perf_counter()
        with torch.no_grad():
            for h in hidden_batches():
                pass
        sync()
        encoder_s = time.perf_counter() - start
        best_first_s, fast, works = best_first(plain=False)
        torch_search_s, fast_torch, _ = best_first(plain=True)
        start = time.perf_counter()
        slow = []
        with torch.no_grad():
            for h in hidden_batches():
                paths, _ = best_paths(module.head(h), tree, "sibling", stop=True, semantics="terminal")
                slow.append(paths)
        sync()
        exhaustive_s = time.perf_counter() - start
    fast, slow, work = torch.cat(fast), torch.cat(slow), torch.cat(works)
    same = (fast == slow).all(1)
    from hiclass_parallel.ops.engine import _native_best_first

    report.update({
        "c_search": _native_best_first.available() and not args.device.startswith("cuda"),
        "encoder_s": encoder_s, "best_first_s": best_first_s, "torch_search_s": torch_search_s,
        "exhaustive_s": exhaustive_s, "speedup": exhaustive_s / best_first_s,
        "speedup_torch_search": exhaustive_s / torch_search_s,
        "identical_rows": int(same.sum()), "differing_rows": int((~same).sum()),
        "torch_search_identical_rows": int((torch.cat(fast_torch) == slow).all(1).sum()),
        "columns_scored_mean": float(work.float().mean()), "columns_scored_p99": float(work.float().quantile(0.99)),
        "columns_scored_max": int(work.max()), "fallback_rows": int((work >= clf.n_scores_).sum()),
        "load_average_end": os.getloadavg()[0],
    })
    if report["differing_rows"]:
        # Rows where the two differ: are they ties up to float rounding of the two score routes?
        scores = []
        with torch.no_grad():
            for h in hidden_batches():
                scores.append(module.head(h))
        from hiclass_parallel.ops import node_log_probs

        full = torch.cat(scores)[~same]
        joint = node_log_probs(full, tree, "sibling", stop=True, semantics="terminal")
        last = lambda P: P.gather(1, ((P >= 0).sum(1, keepdim=True) - 1)).squeeze(1)
        gap = (joint.gather(1, last(slow[~same]).unsqueeze(1)) - joint.gather(1, last(fast[~same]).unsqueeze(1))).abs()
        report["differing_max_log_prob_gap"] = float(gap.max())
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
