"""What the tree loss adds to a training epoch, against plain cross-entropy.

The same module class (the classifier's default :class:`~hiclass_parallel.estimators.MLP`),
the same data, the same mini-batches in the same order, the same optimiser: only the
criterion changes. One training step is forward, loss, backward and an Adam step, exactly as
skorch runs it, without skorch's bookkeeping (identical for both). Each variant first runs a
few warm-up steps, then the timed steps; the variants take turns ``repeats`` times and the
fastest round of each counts, which keeps the noise of a shared machine out of the ratio.

Reported: seconds per epoch (per-step time times the steps in one epoch of the training
split), the ratio tree / flat, and, for diagnosis, the criterion alone (forward and backward
of the loss on fixed scores) per step.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def _criteria(tree: Any) -> dict[str, Any]:
    import torch

    from hiclass_parallel.losses import HierarchicalCrossEntropy

    return {
        "flat": (torch.nn.CrossEntropyLoss(), tree.n_classes),
        "level": (HierarchicalCrossEntropy(tree=tree, partition="level", stop=False), None),
        "sibling": (HierarchicalCrossEntropy(tree=tree, partition="sibling", stop=False), None),
    }


def _n_outputs(tree: Any, partition: str) -> int:
    try:
        from hiclass_parallel.ops.groups import n_outputs

        return int(n_outputs(tree, partition=partition, stop=False))
    except ImportError:
        return int(tree.n_classes)


def epoch_overhead(
    tree: Any,
    data: dict[str, Any],
    lr: float = 3e-3,
    batch_size: int = 256,
    module_params: dict | None = None,
    max_batches: int = 200,
    warmup_batches: int = 3,
    repeats: int = 3,
    seed: int = 0,
) -> dict[str, Any]:
    import torch

    from benchmarks._peers import _dense_float32, _default_module, module_kwargs_for

    X = torch.as_tensor(_dense_float32(data["X_train"]))
    y = torch.as_tensor(np.asarray(data["y_train"], dtype=np.int64))
    n = X.shape[0]
    steps_per_epoch = int(np.ceil(n / batch_size))
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=g)
    n_steps = min(max_batches, steps_per_epoch)
    batches = [order[i * batch_size:(i + 1) * batch_size] for i in range(n_steps + warmup_batches)]
    batches = [(X[b], y[b]) for b in batches if b.numel()]
    module_cls = _default_module()
    criteria = _criteria(tree)
    models = {}
    for name, (crit, width) in criteria.items():
        torch.manual_seed(seed)
        width = width if width is not None else _n_outputs(tree, name)
        module = module_cls(**module_kwargs_for(module_cls, X.shape[1], width, dict(module_params or {})))
        models[name] = (module, torch.optim.Adam(module.parameters(), lr=lr, fused=True), crit)

    def step(name: str, xb: Any, yb: Any) -> None:
        module, opt, crit = models[name]
        opt.zero_grad()
        loss = crit(module(xb), yb)
        loss.backward()
        opt.step()

    best = {name: float("inf") for name in models}
    for name in models:
        for xb, yb in batches[:warmup_batches]:
            step(name, xb, yb)
    timed_batches = batches[warmup_batches:] or batches
    for _ in range(repeats):
        for name in models:
            start = time.perf_counter()
            for xb, yb in timed_batches:
                step(name, xb, yb)
            best[name] = min(best[name], (time.perf_counter() - start) / len(timed_batches))

    # The criterion alone: forward + backward of the loss on fixed scores (diagnosis).
    crit_only = {}
    xb, yb = timed_batches[0]
    for name, (module, _, crit) in models.items():
        with torch.no_grad():
            scores = module(xb)
        t_best = float("inf")
        for _ in range(max(3, repeats)):
            s = scores.clone().requires_grad_(True)
            start = time.perf_counter()
            crit(s, yb).backward()
            t_best = min(t_best, time.perf_counter() - start)
        crit_only[name] = t_best

    out: dict[str, Any] = {
        "n_batches": len(timed_batches),
        "steps_per_epoch": steps_per_epoch,
        "batch_size": batch_size,
        "repeats": repeats,
    }
    for name in models:
        out[f"{name}_step_s"] = best[name]
        out[f"{name}_s"] = best[name] * steps_per_epoch
        out[f"{name}_criterion_s"] = crit_only[name]
    for name in ("level", "sibling"):
        out[f"{name}_ratio"] = out[f"{name}_s"] / out["flat_s"]
    return out
