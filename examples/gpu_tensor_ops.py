"""The tensor methods on GPU arrays: torch CUDA tensors and CuPy arrays
====================================================================

The same functions take NumPy, torch (CPU or CUDA) and CuPy arrays and return results of the
same kind on the same device; the tree's buffers are copied to each device once. Without a
CUDA device (or without CuPy) the GPU parts are skipped with the reason.

Run: ``python examples/gpu_tensor_ops.py``
"""

from __future__ import annotations

import numpy as np
import torch

from hiclass_parallel import labels_to_paths, partition_scores
from hiclass_parallel.datasets import load_wordnet_tree
from hiclass_parallel.losses import HierarchicalCrossEntropy
from hiclass_parallel.ops.decode import best_paths


def run_on(name: str, xp_scores, xp_labels, tree) -> None:
    paths = labels_to_paths(xp_labels, tree)
    partitioned = partition_scores(xp_scores, tree)
    decoded, _ = best_paths(xp_scores, tree)
    print(f"{name:>12}: paths {type(paths).__module__}.{type(paths).__name__} {tuple(paths.shape)}, "
          f"partitioned {tuple(partitioned.shape)}, best paths {tuple(decoded.shape)}", flush=True)


def main(batch: int = 8) -> dict:
    # flush=True: each stage shows at once, also when the output goes to a pipe or a log
    print("loading the WordNet tree (117,659 classes) ...", flush=True)
    tree = load_wordnet_tree()
    print(f"running the tensor methods on a batch of {batch} on each array library ...", flush=True)
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(batch, tree.n_classes)).astype(np.float32)
    labels = tree.to_ids(["dog.n.01", "rock_hind.n.01"] * (batch // 2))
    ran = ["numpy", "torch-cpu"]
    run_on("numpy", scores, labels, tree)
    run_on("torch-cpu", torch.from_numpy(scores), torch.from_numpy(labels), tree)
    if torch.cuda.is_available():
        s, y = torch.from_numpy(scores).cuda(), torch.from_numpy(labels).cuda()
        run_on("torch-cuda", s, y, tree)
        loss = HierarchicalCrossEntropy(tree).to("cuda")(s, y)
        print(f"  loss on cuda: {loss.item():.3f}", flush=True)
        ran.append("torch-cuda")
    else:
        print("  torch-cuda: skipped (torch sees no CUDA device)", flush=True)
    try:
        import cupy

        cupy.zeros(1)
    except Exception as exc:  # not installed, or no device
        print(f"  cupy: skipped ({type(exc).__name__}: {exc})", flush=True)
    else:
        run_on("cupy", cupy.asarray(scores), cupy.asarray(labels), tree)
        ran.append("cupy")
    return {"ran": ran}


if __name__ == "__main__":
    main()
