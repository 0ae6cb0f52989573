"""``sample_weight`` of the criteria: each sample's rows times its weight, a weighted mean.

For every criterion and route (every score; path-local with the in-batch level term; a DAG's
copies), integer weights give the loss and gradients of the batch with each sample repeated
that many times, and a zero weight those of the batch without the sample.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hiclass_parallel.dag import Dag
from hiclass_parallel.losses import DagCrossEntropy, HierarchicalCrossEntropy, PathLocalCrossEntropy


def _loss_and_grad(criterion, scores, target, weight=None, score_fn=False):
    scores = scores.detach().clone().requires_grad_()
    given = (lambda rows, cols: scores[rows, cols]) if score_fn else scores
    loss = criterion(given, target) if weight is None else criterion(given, target, sample_weight=weight)
    loss.backward()
    return loss.detach(), scores.grad


def _criteria(random_tree):
    tree = random_tree(0, 40)
    dag = Dag.from_edges([("a", None), ("b", None), ("c", "a"), ("c", "b"), ("d", "c"), ("e", "a"), ("f", "e")])
    unrolled = dag.unroll()
    rng = np.random.default_rng(0)
    tree_target = torch.as_tensor(rng.integers(-1, tree.n_classes, 12))
    dag_target = torch.as_tensor(rng.integers(-1, dag.n_nodes, 12))
    return {
        "full-level": (HierarchicalCrossEntropy(tree, "level", level_weights=rng.uniform(0.5, 2.0, tree.n_levels)),
                       tree_target, False),
        "full-sibling-stops": (HierarchicalCrossEntropy(tree, "sibling", stop=True, semantics="terminal"),
                               tree_target, False),
        "path-local": (PathLocalCrossEntropy(tree, level_contrast=0.3), tree_target, True),
        "path-local-stops": (PathLocalCrossEntropy(tree, stop=True, level_contrast=0.3), tree_target, True),
        "dag": (DagCrossEntropy(unrolled, level_contrast=0.3), dag_target, False),
        "dag-path-local": (DagCrossEntropy(unrolled, level_contrast=0.3), dag_target, True),
    }


@pytest.mark.parametrize("name", ["full-level", "full-sibling-stops", "path-local", "path-local-stops", "dag",
                                  "dag-path-local"])
def test_integer_weights_are_repeated_samples(random_tree, name):
    criterion, target, score_fn = _criteria(random_tree)[name]
    criterion.train()  # the in-batch level term too
    B = target.shape[0]
    width = criterion.tree.n_classes if isinstance(criterion, DagCrossEntropy) else criterion.n_outputs
    scores = torch.randn(B, width, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    counts = torch.as_tensor(np.random.default_rng(2).integers(0, 4, B))
    repeat = torch.repeat_interleave(torch.arange(B), counts)
    loss, grad = _loss_and_grad(criterion, scores, target, counts.double(), score_fn)
    loss_r, grad_r = _loss_and_grad(criterion, scores[repeat], target[repeat], None, score_fn)
    torch.testing.assert_close(loss, loss_r, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, torch.zeros_like(grad).index_add(0, repeat, grad_r), rtol=1e-10, atol=1e-12)
    # weights times a constant: the same weighted mean
    loss_c, grad_c = _loss_and_grad(criterion, scores, target, 2.5 * counts.double(), score_fn)
    torch.testing.assert_close(loss_c, loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_c, grad, rtol=1e-10, atol=1e-12)


def test_weights_of_the_wrong_shape_are_a_named_error(random_tree):
    criterion, target, _ = _criteria(random_tree)["path-local"]
    scores = torch.zeros(target.shape[0], criterion.n_outputs)
    with pytest.raises(ValueError, match=r"sample_weight has shape \(3,\); expected one weight per sample \(12,\)"):
        criterion(lambda r, c: scores[r, c], target, sample_weight=torch.ones(3))
