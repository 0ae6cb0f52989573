"""Export for serving: network + exact decoder as one exportable torch module.

Checked for identical paths against ``HierarchicalClassifier.predict`` on random trees with
shuffled node ids (both partitions, partial and terminal semantics, the best-first route of
SparseMLP) and on 1,000 WordNet glosses, in eager torch, through ``torch.export`` with two
batch sizes, and in onnxruntime.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from support import sparsify

from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import (
    HierarchicalClassifier,
    TreeDecoder,
    export_onnx,
    export_program,
    serving_module,
)
from hiclass_parallel.estimators.answer._prototypes import last_nodes
from hiclass_parallel.ops import best_paths
from hiclass_parallel.ops.groups import n_outputs, node_log_probs

pytestmark = pytest.mark.scale_out

HAVE_ONNX = all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime"))
needs_onnx = pytest.mark.skipif(not HAVE_ONNX, reason="ONNX export needs onnx, onnxscript and onnxruntime "
                                                      "(the 'export' extra)")


def as_labels(clf, paths: np.ndarray) -> np.ndarray:
    """Node-id paths as predict writes them: labels, -1 read as the pad label."""
    lookup = np.append(clf.classes_.astype(object), clf.pad_label_)
    return lookup[paths].astype(clf.predict(np.zeros((1, clf.n_features_in_), np.float32)).dtype)


def check_all_routes(clf, X, tmp_path, onnx: bool = True) -> None:
    expected = clf.predict(X)
    dense = torch.from_numpy(np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float32))
    paths, _ = serving_module(clf)(dense)
    np.testing.assert_array_equal(as_labels(clf, paths.numpy()), expected)
    program = export_program(clf, dense[:3])
    for rows in (slice(0, 1), slice(None)):  # the batch is dynamic, down to one row
        paths, _ = program.module()(dense[rows])
        np.testing.assert_array_equal(as_labels(clf, paths.numpy()), expected[rows])
    if onnx and HAVE_ONNX:
        import onnxruntime

        path = export_onnx(clf, tmp_path / "model.onnx", dense[:3])
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        for rows in (slice(0, 1), slice(None)):
            paths, _ = session.run(None, {"X": dense[rows].numpy()})
            np.testing.assert_array_equal(as_labels(clf, paths), expected[rows])


@pytest.mark.parametrize("partition", ["level", "sibling"])
@pytest.mark.parametrize("semantics", ["partial", "terminal"])
def test_decoder_equals_best_paths_on_shuffled_trees(partition, semantics, random_tree):
    rng = np.random.default_rng(3)
    for n in (1, 2, 15, 60):
        tree = random_tree(rng, n)
        stop = semantics == "terminal" or bool(rng.integers(2))
        scores = torch.from_numpy(rng.normal(scale=3, size=(40, n_outputs(tree, partition, stop))).astype(np.float32))
        decoder = TreeDecoder(tree, partition, stop, semantics)
        torch.testing.assert_close(decoder.node_log_probs(scores),
                                   node_log_probs(scores, tree, partition, stop, semantics))
        paths, log_prob = decoder(scores)
        ref_paths, ref_log_prob = best_paths(scores, tree, partition, stop, semantics)
        torch.testing.assert_close(paths, ref_paths)
        torch.testing.assert_close(log_prob, ref_log_prob)


@pytest.mark.parametrize(("partition", "semantics"), [("level", "partial"), ("sibling", "terminal")])
def test_exported_paths_equal_predict_on_a_shuffled_tree(partition, semantics, tmp_path, one_torch_thread, random_tree):
    tree = random_tree(0, 40)
    X, y, _ = make_hierarchical_classification(n_samples=200, n_features=6, tree=tree, random_state=0,
                                               terminal_fraction=0.3)
    clf = HierarchicalClassifier(tree, partition=partition, semantics=semantics, max_epochs=3,
                                 random_state=0, prototypes=None).fit(X, y)  # re-ranking is not exported
    check_all_routes(clf, X.astype(np.float32), tmp_path)


def test_sparse_best_first_model_exports_with_dense_input(tmp_path, one_torch_thread):
    X, y, tree = make_hierarchical_classification(n_samples=200, n_features=30, branching=3, depth=3, random_state=2)
    X = sp.csr_matrix(np.where(X > 0.8, X, 0.0).astype(np.float32))
    clf = HierarchicalClassifier(tree, max_epochs=3, random_state=0, module__hidden_units=16,
                                 prototypes=None).fit(X, y)  # re-ranking is not exported
    assert clf.path_local_  # decoded best-first by predict, exhaustively by the exported module
    check_all_routes(clf, X, tmp_path, onnx=False)


def test_wordnet_glosses_1000_rows(tmp_path, one_torch_thread):
    from sklearn.feature_extraction.text import TfidfVectorizer

    from hiclass_parallel.datasets import load_wordnet_glosses

    data = load_wordnet_glosses("animal.n.01", include_lemmas=True)
    X = TfidfVectorizer(sublinear_tf=True, min_df=2, dtype=np.float32).fit_transform(data.data)
    y = data.target
    clf = HierarchicalClassifier(data.tree, max_epochs=2, random_state=0, module__hidden_units=64,
                                 prototypes=None).fit(X, y)  # re-ranking is not exported
    assert clf.partition_ == "sibling" and clf.path_local_  # the default for sparse text
    rows = np.random.default_rng(0).choice(X.shape[0], 1000, replace=False)
    check_all_routes(clf, X[rows], tmp_path)


def test_threshold_decoding_and_terminal_without_stops_are_refused():
    X, y, tree = make_hierarchical_classification(n_samples=50, n_features=4, branching=2, depth=2, random_state=0)
    clf = HierarchicalClassifier(tree, max_epochs=1, decoding="threshold", prototypes=None).fit(X, y)
    with pytest.raises(ValueError, match="only decoding='best'"):
        serving_module(clf)
    clf.set_params(decoding="best")
    with pytest.raises(ValueError, match="needs a model trained with stop"):
        serving_module(clf, semantics="terminal")


# ---------------------------------------------------------------------------- non-finite rows
@pytest.mark.parametrize("partition", ["level", "sibling"])
@pytest.mark.parametrize("semantics", ["partial", "terminal"])
def test_decoder_blanks_undecidable_rows_as_best_paths_does(partition, semantics, random_tree):
    """Scores holding NaN or +inf have no probabilities: the empty path (all -1) with
    log-probability NaN, as :func:`best_paths`; -inf scores are ordinary (probability 0)."""
    rng = np.random.default_rng(7)
    for n in (2, 15, 40):
        tree = random_tree(rng, n)
        stop = semantics == "terminal" or bool(rng.integers(2))
        width = n_outputs(tree, partition, stop)
        scores = rng.normal(scale=3, size=(12, width))
        for row, value in zip(range(1, 12, 2), [np.nan, np.inf, -np.inf, np.nan, np.inf, -np.inf]):
            scores[row, rng.integers(width)] = value
        scores[11] = -np.inf  # every group -inf
        scores = torch.from_numpy(scores.astype(np.float32))
        paths, log_prob = TreeDecoder(tree, partition, stop, semantics)(scores)
        ref_paths, ref_log_prob = best_paths(scores, tree, partition, stop, semantics)
        bad = (torch.isnan(scores) | (scores == float("inf"))).any(1)
        assert bool(bad[1]) and bool(bad[3])
        assert (paths[bad] == -1).all() and torch.isnan(log_prob[bad]).all()
        torch.testing.assert_close(paths, ref_paths)
        torch.testing.assert_close(log_prob, ref_log_prob, equal_nan=True)


@pytest.mark.parametrize(("partition", "semantics"), [("sibling", "partial"), ("level", "terminal")])
def test_exported_routes_agree_on_non_finite_rows(partition, semantics, tmp_path, one_torch_thread):
    """A row of X holding NaN or +-inf: predict refuses it, but a serving runtime cannot raise
    per row, so every exported route gives it the empty path (all -1) and log-probability NaN;
    the finite rows of the same batch are predict's."""
    X, y, tree = make_hierarchical_classification(n_samples=150, n_features=6, branching=2, depth=3, random_state=0)
    clf = HierarchicalClassifier(tree, partition=partition, semantics=semantics, max_epochs=2,
                                 random_state=0, prototypes=None).fit(X, y)  # re-ranking is not exported
    X = X[:8].astype(np.float32)
    bad = np.array([False, True, False, True, True, False, False, True])
    X[1, 0], X[3, 5], X[4, 2], X[7] = np.nan, np.inf, -np.inf, np.nan
    expected = clf.predict(X[~bad])
    dense = torch.from_numpy(X)
    with torch.no_grad():
        outputs = {"serving_module": serving_module(clf)(dense), "torch.export": export_program(clf).module()(dense)}
    if HAVE_ONNX:
        import onnxruntime

        session = onnxruntime.InferenceSession(export_onnx(clf, tmp_path / "model.onnx"),
                                               providers=["CPUExecutionProvider"])
        outputs["onnx"] = tuple(torch.from_numpy(a) for a in session.run(None, {"X": X}))
    for route, (paths, log_prob) in outputs.items():
        paths, log_prob = np.asarray(paths), np.asarray(log_prob)
        assert (paths[bad] == -1).all(), route
        assert np.isnan(log_prob[bad]).all(), route
        assert np.isfinite(log_prob[~bad]).all(), route
        np.testing.assert_array_equal(as_labels(clf, paths[~bad]), expected, err_msg=route)
    first = outputs["serving_module"]
    for route, (paths, log_prob) in outputs.items():
        np.testing.assert_array_equal(np.asarray(paths), first[0].numpy(), err_msg=route)
        np.testing.assert_allclose(np.asarray(log_prob), first[1].numpy(), rtol=1e-5, err_msg=route)


def test_a_multi_label_classifier_is_refused_by_name():
    """Its network scores the DAG's unrolled tree, so exported ids are copies,
    not indices into ``classes_``; it is refused, naming the class and what to do instead."""
    from hiclass_parallel.dag import Dag
    from hiclass_parallel.estimators import MultiLabelHierarchicalClassifier

    dag = Dag.from_edges([("d", "b"), ("d", "c"), ("b", "a"), ("c", "a")])
    X = np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32)
    clf = MultiLabelHierarchicalClassifier(dag, max_epochs=1, random_state=0).fit(X, [["d"], ["b"]] * 10)
    for export in (serving_module, export_program, lambda c: export_onnx(c, "unused.onnx")):
        with pytest.raises(TypeError, match=r"MultiLabelHierarchicalClassifier is not exported: .*unrolled tree"
                                            r".*predict"):
            export(clf)


def test_exported_confidence_is_predict_confidence(tmp_path, one_torch_thread):
    """``confidence=True`` adds the calibrated confidence of each answer to every exported route,
    equal to ``predict_confidence``; NaN on the rows it blanks; the identity map without a
    calibrator; and the two-output graph is unchanged without the flag."""
    X, y, tree = make_hierarchical_classification(n_samples=2500, n_features=8, branching=3, depth=2, random_state=0)
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=3, random_state=0, prototypes=None).fit(X, y)
    assert clf.answer_.calibrator is not None
    X = X[:40].astype(np.float32)
    X[3, 1] = np.nan
    finite = np.isfinite(X).all(1)
    expected = clf.predict_confidence(X[finite])
    dense = torch.from_numpy(X)
    with torch.no_grad():
        outputs = {"serving_module": serving_module(clf, confidence=True)(dense),
                   "torch.export": export_program(clf, confidence=True).module()(dense)}
        assert len(serving_module(clf)(dense)) == 2
    if HAVE_ONNX:
        import onnxruntime

        session = onnxruntime.InferenceSession(export_onnx(clf, tmp_path / "model.onnx", confidence=True),
                                               providers=["CPUExecutionProvider"])
        assert [o.name for o in session.get_outputs()] == ["paths", "log_prob", "confidence"]
        outputs["onnx"] = tuple(torch.from_numpy(a) for a in session.run(None, {"X": X}))
    for route, (_, log_prob, confidence) in outputs.items():
        confidence = np.asarray(confidence)
        np.testing.assert_allclose(confidence[finite], expected, rtol=1e-4, atol=1e-6, err_msg=route)
        assert np.isnan(confidence[~finite]).all(), route
    uncalibrated = HierarchicalClassifier(tree, semantics="terminal", max_epochs=1, random_state=0,
                                          calibration=None, prototypes=None).fit(X[finite], y[:40][finite])
    with torch.no_grad():
        _, log_prob, confidence = serving_module(uncalibrated, confidence=True)(dense[finite])
    torch.testing.assert_close(confidence, torch.exp(log_prob).clamp(1e-7, 1 - 1e-7))


@pytest.mark.parametrize("kind, flat_term, path_term", [
    ("gaussian", None, None), ("gaussian", 16.0, None), ("gaussian", 16.0, 4.0), ("cosine", None, None),
    ("cosine", 16.0, None), ("cosine", "candidates", None), ("cosine", 16.0, 4.0)])
def test_exported_reranking_equals_predict(kind, flat_term, path_term, tmp_path, one_torch_thread, monkeypatch):
    """A model whose class prototypes (and linear terms) re-rank the answer exports the re-ranking:
    eager torch, torch.export (batches of 1 and all) and onnxruntime give predict's answers, on
    every row whose best re-ranked score leads the next by more than float noise.
    ``"candidates"``: the flat term's SVM of the candidates (sparse weights: the SVM against every
    row over the cost budget); a number: the SVM against every row (within it)."""
    from hiclass_parallel.estimators.fitting import _costs

    every_row = float("inf") if flat_term == "candidates" else 0.0
    monkeypatch.setattr(_costs, "flat_svm_cost", lambda *args: every_row)
    monkeypatch.setattr(_costs, "least_squares_cost", lambda *args: 0.0)
    real = _costs.path_term_cost
    monkeypatch.setattr(_costs, "path_term_cost", lambda X, classes: (0.0, real(X, classes)[1]))
    if flat_term == "candidates":
        flat_term = 8.0
    X, y, tree = make_hierarchical_classification(n_samples=1200, n_features=12, branching=3, depth=3, noise=1.5,
                                                  random_state=0)
    if kind == "cosine":  # sparse non-negative rows, like TF-IDF
        rng = np.random.default_rng(0)
        X = sparsify(X, 0.5, rng)
    if kind == "gaussian" and path_term is not None:  # normalised rows: the linear terms' least-squares SVMs
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    clf = HierarchicalClassifier(tree, semantics="terminal", max_epochs=3, random_state=0, flat_term=flat_term,
                                 path_term=path_term, prototypes=2.0 if kind == "gaussian" else 16.0,
                                 prototype_candidates=5).fit(X, y)
    assert clf.answer_.terms["prototypes"].KIND == kind and (clf.answer_.term("flat_term") is None) == (flat_term is None)
    assert flat_term != 8.0 or sp.issparse(clf.answer_.terms["flat_term"].coef)
    rows = X[:300]
    expected = clf.predict(rows)
    plain = clf.set_params(prototypes=None, flat_term=None, path_term=None).predict(rows)
    assert (expected != plain).any()  # the re-ranking changes answers
    clf.set_params(prototypes=2.0 if kind == "gaussian" else 16.0, flat_term=flat_term, path_term=path_term)
    paths, log_prob, similarity = clf._reranking_candidates(rows)
    linear = sum((weight * clf.answer_.terms[name].score(rows, last_nodes(paths))
                  for name, weight in (("flat_term", flat_term), ("path_term", path_term)) if weight is not None),
                 start=0.0)
    score = np.sort(np.where(np.isfinite(log_prob), log_prob + clf.prototypes * similarity + linear, -np.inf), axis=1)
    clear = score[:, -1] - score[:, -2] > 1e-3
    assert clear.mean() > 0.9
    dense = torch.from_numpy(np.asarray(rows.toarray() if sp.issparse(rows) else rows, dtype=np.float32))
    paths, _ = serving_module(clf)(dense)
    np.testing.assert_array_equal(as_labels(clf, paths.numpy())[clear], expected[clear])
    program = export_program(clf, dense[:3])
    for part in (slice(0, 1), slice(None)):
        paths, _ = program.module()(dense[part])
        np.testing.assert_array_equal(as_labels(clf, paths.numpy())[clear[part]], expected[part][clear[part]])
    if HAVE_ONNX:
        import onnxruntime

        session = onnxruntime.InferenceSession(export_onnx(clf, tmp_path / "model.onnx", dense[:3]),
                                               providers=["CPUExecutionProvider"])
        paths, _ = session.run(None, {"X": dense.numpy()})
        np.testing.assert_array_equal(as_labels(clf, paths)[clear], expected[clear])


def test_the_reranker_holds_the_kept_terms_modules_only():
    from hiclass_parallel import Tree
    from hiclass_parallel.estimators import AnswerReranker
    from hiclass_parallel.estimators.answer import ClassPrototypes, FlatMargins

    tree = Tree.from_parents([-1, -1, 0, 0, 1, 1])
    X = sp.csr_matrix(np.eye(6, dtype=np.float32)[[2, 2, 3, 3, 4, 5]])
    ids = np.array([2, 2, 3, 3, 4, 5])
    flat, prototypes = FlatMargins.fit(X, ids, tree.n_classes, random_state=0), ClassPrototypes.from_rows(X, ids, tree)
    reranker = AnswerReranker({"prototypes": prototypes, "flat_term": flat}, {"prototypes": 0.0, "flat_term": 2.0}, 3)
    assert list(reranker.terms) == ["flat_term"] and float(reranker.weight_flat_term) == 2.0
    assert not hasattr(reranker, "weight_prototypes")
    value = torch.tensor([[-9.0, -9.0, -0.1, -3.0, -4.0, -5.0]])  # the model's best: node 2
    best, log_prob = reranker(torch.from_numpy(X[[3]].toarray()), value)  # a row of node 3's feature
    assert int(best) == 3 and float(log_prob) == -3.0  # the margin outweighs the model's 2.9 nats
    with pytest.raises(ValueError, match=r"unknown re-ranking terms \['rules'\]"):
        AnswerReranker({"rules": flat}, {"rules": 1.0}, 3)
