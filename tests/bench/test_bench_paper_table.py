"""benchmarks/bench_paper_table.py: the tree buffers it reports are the ones the operations cached."""

from __future__ import annotations

import numpy as np
import pytest

from hiclass_parallel import Tree, labels_to_paths, partition_scores


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_buffers_counts_the_cached_device_arrays(library):
    from benchmarks.bench_paper_table import _buffers

    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3])
    scores = np.zeros((2, tree.n_classes), dtype=np.float32)
    labels = np.array([6, 4])
    if library == "torch":
        import torch

        scores, labels = torch.as_tensor(scores), torch.as_tensor(labels)
    partition_scores(scores, tree)
    labels_to_paths(labels, tree)
    found = _buffers(tree, scores)
    # the int32 paths (C x L) and one int64 flat level index per class, nothing else
    assert found == {"paths": tree.n_classes * tree.n_levels * 4, "flat_level_index": tree.n_classes * 8}
