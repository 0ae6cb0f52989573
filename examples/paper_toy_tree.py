"""The paper's toy tree (Figure 1), step by step
=============================================

Encodes the 9-class tree once, partitions a batch of scores by level with one masked fill,
maps labels at any depth to ancestral paths with one gather, flattens the pair for a
cross-entropy (section 3.1), and checks that the lean engine gives the same loss without
the (B, L, C) tensor.

Run: ``python examples/paper_toy_tree.py``
"""

from __future__ import annotations

import numpy as np
import torch

from hiclass_parallel import Tree, flatten_for_training, labels_to_paths, partition_scores

NAMES = ["dog", "cat", "small dog", "big dog", "sleepy cat", "curious cat",
         "happy big dog", "moody big dog", "Hound of Hades"]


def main(seed: int = 0) -> dict:
    # 1. Encode and store the tree: the paper's classes 1..9 are node ids 0..8 here.
    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3], labels=NAMES)
    print(tree)
    print("M_lc (True = excluded):\n", tree.mask.astype(int))
    print("P_cl (-1 = padding):\n", tree.paths)

    # 2. Partition a batch of five score vectors by level (eq. masked_fill).
    torch.manual_seed(seed)
    scores = torch.randn(5, tree.n_classes, requires_grad=True)
    partitioned = partition_scores(scores, tree)
    print("partitioned scores:", tuple(partitioned.shape))

    # 3. Labels at any depth -> ancestral paths (eq. y_tree): big dog, happy big dog, cat,
    #    curious cat, small dog.
    labels = torch.as_tensor(tree.to_ids(["big dog", "happy big dog", "cat", "curious cat", "small dog"]))
    paths = labels_to_paths(labels, tree)
    for label, path in zip(labels.tolist(), paths.tolist()):
        print(f"  {NAMES[label]:>15}: {' > '.join(NAMES[i] for i in path if i >= 0)}")

    # 4. Flatten and drop padded rows (section 3.1); one cross-entropy trains every level.
    rows, targets = flatten_for_training(partitioned, paths)
    dense_loss = torch.nn.functional.cross_entropy(rows, targets)
    dense_loss.backward()
    print(f"rows {tuple(rows.shape)}, targets {targets.tolist()}, loss {dense_loss.item():.4f}")
    result = {"tree": tree, "rows": rows.shape[0], "dense_loss": dense_loss.item()}

    # 5. The lean engine: the same loss from the (B, C) scores alone.
    try:
        from hiclass_parallel.losses import HierarchicalCrossEntropy
    except ImportError:  # engine not installed in this build
        return result
    lean_loss = HierarchicalCrossEntropy(tree)(scores.detach(), labels)
    print(f"lean loss {lean_loss.item():.4f} (same value, no (B, L, C) tensor)")
    assert np.isclose(lean_loss.item(), dense_loss.item(), rtol=1e-5)
    result["lean_loss"] = float(lean_loss)
    return result


if __name__ == "__main__":
    main()
