"""Metrics of answers at any depth and the losses conformal risk control bounds: hand-computed
values, brute-force checks on random trees with shuffled ids, input handling, scorers."""

from __future__ import annotations

import numpy as np
import pytest

from hiclass_parallel import Tree
from hiclass_parallel.metrics import (
    ConformalLoss,
    conformal_risk,
    conformal_scorers,
    coverage_score,
    label_depth_answer_rate,
    leaf_answer_rate,
    mean_answer_depth,
    miss_loss,
    tree_distance_loss,
)


@pytest.fixture
def tree() -> Tree:
    return Tree.from_dict({"dog": {"small dog": None, "big dog": ["happy big dog", "moody big dog"]},
                           "cat": {"sleepy cat": None}})


def ancestors_or_self(tree: Tree, node: int) -> list[int]:
    out = []
    while node >= 0:
        out.append(node)
        node = int(tree.parents[node])
    return out


def brute_distance(tree: Tree, answer: int, truth: int) -> int:
    """Edges between truth and the nearest node of answer's subtree, walking parent pointers."""
    up_truth = ancestors_or_self(tree, truth)
    if answer < 0 or answer in up_truth:
        return 0
    up_answer = ancestors_or_self(tree, answer)
    common = [n for n in up_answer if n in up_truth]
    if common:
        lca = common[0]
        return up_answer.index(lca) + up_truth.index(lca)
    return len(up_answer) + len(up_truth)  # through the implicit root


def test_hand_values(tree):
    y_true = ["happy big dog", "sleepy cat", "big dog", "small dog"]
    y_pred = [["dog", "big dog", ""], ["", "", ""], ["dog", "big dog", "happy big dog"], ["cat", "", ""]]
    assert coverage_score(y_true, y_pred, tree) == 0.5
    assert mean_answer_depth(y_true, y_pred, tree) == (2 + 0 + 3 + 1) / 4
    assert leaf_answer_rate(y_true, y_pred, tree) == 0.25
    assert label_depth_answer_rate(y_true, y_pred, tree) == 0.0
    assert conformal_risk(y_true, y_pred, tree) == 0.5
    # big dog -> happy big dog: 1 edge; small dog -> cat: 3 edges (through the root); over 2 * 3 levels
    assert conformal_risk(y_true, y_pred, tree, loss="tree_distance") == pytest.approx((1 + 3) / 6 / 4)


def test_ids_and_weights(tree):
    truth = tree.to_ids(["happy big dog", "small dog"])
    answer = np.array([tree.to_ids(["big dog"])[0], -1])
    assert coverage_score(truth, answer, tree, input_type="ids") == 1.0
    assert mean_answer_depth(truth, answer, tree, input_type="ids", sample_weight=[3, 1]) == 1.5


def test_without_a_tree_paths_identify_nodes_by_prefix():
    y_true = [["a", "x"], ["b", "x"]]
    y_pred = [["a", ""], ["a", "x"]]  # the second "x" is under "a", not the true "b"
    assert coverage_score(y_true, y_pred) == 0.5
    assert conformal_risk(y_true, y_pred, loss="tree_distance") == pytest.approx((0 + 4 / 4) / 2)


def test_loss_definitions_against_brute_force(random_tree):
    tree = random_tree(3, 40)
    pairs = np.array([(a, t) for a in range(-1, 40) for t in range(40)])
    answer, truth = pairs[:, 0], pairs[:, 1]
    distance = np.array([brute_distance(tree, a, t) for a, t in pairs])
    np.testing.assert_array_equal(miss_loss(answer, truth, tree), (distance > 0).astype(float))
    np.testing.assert_allclose(tree_distance_loss(answer, truth, tree), distance / (2 * tree.n_levels))
    assert tree_distance_loss(answer, truth, tree).max() <= 1.0


@pytest.mark.parametrize("loss", [miss_loss, tree_distance_loss])
def test_losses_are_monotone_up_every_path(random_tree, loss):
    # Conformal risk control needs it: an answer's parent never costs more than the answer.
    tree = random_tree(5, 60)
    pairs = np.array([(a, t) for a in range(60) for t in range(60)])
    child, truth = pairs[:, 0], pairs[:, 1]
    parent = np.asarray(tree.parents)[child]
    assert (loss(parent, truth, tree) <= loss(child, truth, tree)).all()
    assert (loss(np.full(len(truth), -1), truth, tree) == 0).all()
    assert isinstance(loss, ConformalLoss) and loss.bound == 1.0


def test_user_loss_and_errors(tree):
    def half_miss(answer, truth, t):
        return 0.5 * miss_loss(answer, truth, t)

    y_true, y_pred = ["small dog", "cat"], [["cat", ""], ["cat", ""]]
    assert conformal_risk(y_true, y_pred, tree, loss=half_miss) == 0.25
    with pytest.raises(ValueError, match="needs tree="):
        conformal_risk([["a"]], [["b"]], loss=half_miss)
    with pytest.raises(ValueError, match="needs tree="):
        leaf_answer_rate([["a"]], [["b"]])
    with pytest.raises(ValueError, match="loss must be one of"):
        conformal_risk(y_true, y_pred, tree, loss="hinge")
    with pytest.raises(ValueError, match="out of range"):
        miss_loss([7], [0], tree)


def test_scorers_read_the_tree_from_the_estimator(tree):
    class Fixed:
        tree_ = tree
        pad_label_ = ""

        def predict(self, X):
            return np.array([["dog", "", ""]] * len(X), dtype=object)

    scorers = conformal_scorers(loss="tree_distance")
    X, y = np.zeros((2, 1)), ["small dog", "cat"]
    assert scorers["coverage"](Fixed(), X, y) == 0.5
    assert scorers["mean_answer_depth"](Fixed(), X, y) == 1.0
    assert scorers["neg_risk"](Fixed(), X, y) == pytest.approx(-(2 / 6) / 2)
