"""Which re-ranking terms a fit tries: each term's estimated cost against one budget, and the
terms left at "auto" not built where their weights cannot be learnt."""

import numpy as np
import pytest
import scipy.sparse as sp
from support import text_like

from hiclass_parallel import Tree
from hiclass_parallel.estimators import HierarchicalClassifier
from hiclass_parallel.estimators import _defaults
from hiclass_parallel.estimators.fitting import _answer_fit, _config, _costs


def _fit(X, y, tree, **params):
    params = {"semantics": "terminal", "max_epochs": 3, "random_state": 0, **params}
    return HierarchicalClassifier(tree, **params).fit(X, y)


def test_a_term_within_the_budget_is_tried_and_the_record_says_what_it_costs():
    X, y, tree = text_like(n_samples=240)
    clf = _fit(X, y, tree, max_epochs=10)  # (the network's cost grows with its epochs)
    tried = clf.config_.terms_tried_reason
    assert tried.startswith(f"budget {_config.TERM_BUDGET:g} x the network's estimated fit")
    assert "prototypes:" in tried and "flat_term:" in tried and "tried" in tried
    assert "within the budget" in clf.config_.flat_term_reason
    assert clf.config_.term_weights_reason.startswith("learnt on")


def test_a_term_over_the_budget_is_not_tried_but_a_number_still_builds_it(monkeypatch):
    X, y, tree = text_like(n_samples=240)
    monkeypatch.setattr(_config, "TERM_BUDGET", 1e-9)
    clf = _fit(X, y, tree)
    assert clf.config_.flat_term == 0 and "over the budget" in clf.config_.flat_term_reason
    assert "flat_term: not tried" in clf.config_.terms_tried_reason
    assert clf.answer_.term("flat_term") is None
    fixed = _fit(X, y, tree, flat_term=2.0)  # a number: the term wherever it can be fitted
    assert fixed.answer_.weight("flat_term") == 2.0
    assert "the SVM of the candidates" in fixed.config_.flat_term_reason  # the cheaper one, over the budget


def test_the_budget_picks_the_svm_of_the_candidates_where_only_it_fits(monkeypatch):
    X, y, tree = text_like(n_samples=240)
    monkeypatch.setattr(_costs, "flat_svm_cost", lambda X, n_targets: float("inf"))
    monkeypatch.setattr(_costs, "candidates_svm_cost", lambda *args: 0.0)
    clf = _fit(X, y, tree)
    assert "the SVM of the candidates 0x: the SVM of the candidates tried" in clf.config_.terms_tried_reason


def test_weights_that_cannot_be_learnt_leave_the_auto_terms_unbuilt(monkeypatch):
    """calibration=None on a fit too large to cross-fit: no rows to learn the weights on, so the
    terms left at "auto" are not built, and a term given a number stays."""
    X, y, tree = text_like(n_samples=240)
    monkeypatch.setattr(_answer_fit, "CROSS_FIT_MAX_ROWS", 100)
    clf = _fit(X, y, tree, calibration=None)
    reason = clf.config_.term_weights_reason
    assert reason.startswith("no weight learnt: 240 rows, at least 100") and "not built" in reason
    assert clf.answer_.kept() == []
    network = _fit(X, y, tree, calibration=None, prototypes=None, flat_term=None, path_term=None)
    np.testing.assert_array_equal(clf.predict(X), network.predict(X))  # the network's own answers
    mixed = _fit(X, y, tree, calibration=None, prototypes=4.0)
    assert mixed.answer_.kept() == ["prototypes"] and mixed.answer_.weight("prototypes") == 4.0
    assert "kept with a fixed weight: prototypes" in mixed.config_.term_weights_reason


def test_the_first_partial_fit_builds_no_auto_term():
    X, y, tree = text_like(n_samples=120)
    clf = HierarchicalClassifier(tree, semantics="terminal", random_state=0)
    clf.partial_fit(X, y)
    assert clf.answer_.kept() == [] and "partial_fit" in clf.config_.term_weights_reason


def test_term_weights_is_no_parameter():
    X, y, tree = text_like(n_samples=60)
    with pytest.raises(ValueError, match="term_weights"):
        HierarchicalClassifier(tree, term_weights="learnt").fit(X, y)
    assert "term_weights" not in HierarchicalClassifier(tree).get_params()


def test_the_estimates_grow_with_what_each_part_reads():
    X, y, tree = text_like(n_samples=240)
    ids = np.asarray(tree.to_ids(y))
    columns = _costs.mean_path_columns(tree, ids, stop=True)
    assert columns > _costs.mean_path_columns(tree, ids, stop=False) > 0
    assert _costs.network_cost(X, columns, 4, 256) == 2 * _costs.network_cost(X, columns, 2, 256)
    assert _costs.flat_svm_cost(X, 20) > _costs.flat_svm_cost(X, 10)
    assert _costs.candidates_svm_cost(X, 10, 20, columns, 256) > _costs.candidates_svm_cost(X, 10, 5, columns, 256)
    assert _costs.prototypes_cost(X) == X.nnz


def test_decoding_counts_its_share_of_a_training_multiply_add_in_the_svm_of_the_candidates():
    X, y, tree = text_like(n_samples=240)
    columns = _costs.mean_path_columns(tree, np.asarray(tree.to_ids(y)), stop=True)
    decode = _costs.decode_cost(X, 20, columns, 256)
    assert decode == pytest.approx(X.shape[0] * 20 * columns * 256 * _defaults.DECODE_SHARE)
    rest = 21 * X.nnz * _defaults.SVM_PASSES + 10 * _defaults.SVM_TARGET_COST
    assert _costs.candidates_svm_cost(X, 10, 20, columns, 256) == pytest.approx(decode + rest)


def test_the_path_term_s_estimate_follows_its_route():
    tree = Tree.from_parents([-1, -1, 0, 0, 1, 2, 2])  # 0: 2 (5, 6), 3; 1: 4
    ids = np.array([5, 6, 3, 4, 1, -1, 5])
    # level 0: nodes 0, 1; level 1: 2, 3, 4 and rows ending above (1); level 2: 5, 6 and "none"
    assert _costs.level_classes(tree, ids) == [2, 4, 3]
    assert _costs.level_classes(tree, np.array([5, 5, 6])) == [2]  # one node each on levels 0, 1
    X = sp.random(7, 5, density=0.5, random_state=0, format="csr")  # sparse, more rows than features: a SVM a level
    assert _costs.path_term_cost(X, [2, 4, 3]) == (pytest.approx(_costs.flat_svm_cost(X, 9)), "svm")
    wide = sp.random(7, 50, density=0.2, random_state=0, format="csr")  # fewer rows: one least-squares system
    assert _costs.path_term_cost(wide, [2, 4, 3]) == (pytest.approx(_costs.least_squares_cost(wide, 9)),
                                                      "least_squares")
    dense = X.toarray()
    assert _costs.path_term_cost(dense, [2, 4]) == (pytest.approx(_costs.least_squares_cost(dense, 6)),
                                                    "least_squares")
    # where the system of the rows costs more than a SVM a level (tens of thousands of rows), the SVMs
    many = sp.random(3000, 5000, density=0.001, random_state=0, format="csr")
    assert _costs.least_squares_cost(many, 9) > _costs.flat_svm_cost(many, 9)
    assert _costs.path_term_cost(many, [2, 4, 3]) == (pytest.approx(_costs.flat_svm_cost(many, 9)), "svm")
    import torch  # sparse rows as a torch tensor count as sparse rows too

    coo = many.tocoo()
    tensor = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, coo.shape)
    assert _costs.path_term_cost(tensor, [2, 4, 3])[1] == "svm"
    # the dual's count (rows x entries + rows^2 x targets + rows^3 + entries x targets) where rows are fewer
    assert _costs.least_squares_cost(wide, 9) == pytest.approx((7 * wide.nnz + 49 * 9 + 343 + wide.nnz * 9)
                                                               * _defaults.SOLVE_SHARE)


@pytest.mark.parametrize("seed", range(3))
def test_the_path_term_s_levels_are_brute_force_on_random_trees(seed, random_tree):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, 60)  # (its ids shuffled)
    ids = rng.integers(-1, tree.n_classes, size=80)
    paths = np.asarray(tree.paths)
    want = []
    for level in range(paths.shape[1]):
        labels = {int(paths[i, level]) if paths[i, level] >= 0 else "none" for i in ids[ids >= 0]}
        if len(labels) >= 2:
            want.append(len(labels))
    assert _costs.level_classes(tree, ids) == want
