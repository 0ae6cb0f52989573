"""The probes of issue 15, kept: bad and extreme input at every public entry point.

Each test is one probe that once gave a wrong result, a bare crash or a misleading error; it
asserts the correct result or the named error now.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from hiclass_parallel import PAD, Tree, TreeError, UnknownLabelError
from hiclass_parallel.metrics import (
    hierarchical_classification_report,
    hierarchical_f1_score,
    hierarchical_fbeta_score,
    hierarchical_recall_score,
)
from hiclass_parallel.ops import best_paths, group_log_softmax, group_logsumexp, topk_paths

PAPER = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])


# ---------------------------------------------------------------------------- tree
def test_labels_are_read_only():
    tree = Tree.from_edges([("dog", "animal")])
    with pytest.raises(ValueError, match="read-only"):
        tree.labels[0] = "cat"
    assert tree.to_ids(["dog"]).tolist() == [0]


def test_trailing_nul_labels_round_trip(tmp_path):
    tree = Tree.from_edges([("a\0", None), ("a", "a\0"), ("b\0\0", "a")])
    tree.save(tmp_path / "t.npz")
    again = Tree.load(tmp_path / "t.npz")
    assert again == tree and again.labels.tolist() == ["a\0", "a", "b\0\0"]


def test_nan_labels_refused():
    with pytest.raises(TreeError, match="NaN"):
        Tree.from_parents([-1, 0], labels=[float("nan"), float("nan")])
    with pytest.raises(TreeError, match="NaN"):
        Tree.from_edges([(float("nan"), None)])


def test_unhashable_labels_named():
    with pytest.raises(TreeError, match=r"\[1\].*unhashable"):
        Tree.from_parents([-1, 0], labels=[[1], [2]])
    with pytest.raises(TreeError, match="unhashable"):
        Tree.from_edges([(["a"], None)])
    values = np.empty(2, dtype=object)
    values[:] = ["dog", [1]]
    with pytest.raises(UnknownLabelError, match=r"1 label is not a class of the tree: \[1\]"):
        Tree.from_edges([("dog", "animal")]).to_ids(values)


def test_from_dict_deep_chain():
    nested: dict = {}
    cur = nested
    for i in range(3000):
        cur[i] = {}
        cur = cur[i]
    tree = Tree.from_dict(nested)
    assert tree.n_levels == 3000 and tree.labels[-1] == 2999


@pytest.mark.parametrize("content", [b"hello", b"PK\x03\x04 truncated", b""])
def test_load_damaged_file(tmp_path, content):
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(TreeError, match="is not a tree saved by Tree.save") as info:
        Tree.load(path)
    assert "allow_pickle" not in str(info.value)


def test_load_truncated_and_wrong_archive(tmp_path):
    PAPER.save(tmp_path / "t.npz")
    raw = (tmp_path / "t.npz").read_bytes()
    (tmp_path / "half.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TreeError, match="not a readable .npz archive"):
        Tree.load(tmp_path / "half.npz")
    np.savez(tmp_path / "other.npz", x=np.arange(2))
    with pytest.raises(TreeError, match="no parents, labels, label_kind"):
        Tree.load(tmp_path / "other.npz")
    with pytest.raises(FileNotFoundError):
        Tree.load(tmp_path / "missing.npz")


def test_load_reads_files_of_the_old_str_format(tmp_path):
    np.savez(tmp_path / "old.npz", parents=np.array([-1, 0], dtype=np.int32), labels=np.array(["a", "b"]),
             label_kind=np.asarray("str"))
    assert Tree.load(tmp_path / "old.npz").labels.tolist() == ["a", "b"]


# ---------------------------------------------------------------------------- ops: NaN / inf
@pytest.mark.parametrize("native", ["1", "0"])
def test_plus_inf_same_on_c_kernel_and_numpy(native):
    code = """
import numpy as np
from hiclass_parallel import Tree
from hiclass_parallel.ops import groups, group_logsumexp, group_log_softmax
groups._NATIVE_MIN_MEAN_GROUP = 1  # let the C kernel serve this small tree when it is built
tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
x = np.zeros((3, 9), dtype=np.float32); x[0, 0] = np.inf; x[1, 2] = np.nan; x[2, :] = -np.inf
with np.errstate(all="ignore"):
    print(group_logsumexp(x, tree).tolist()); print(group_log_softmax(x, tree).tolist())
"""
    env = dict(os.environ, HICLASS_PARALLEL_NATIVE=native)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    lse, lsm = (eval(line, {"inf": math.inf, "nan": math.nan}) for line in out.splitlines())
    assert lse[0][0] == math.inf and math.isnan(lse[1][1]) and lse[2] == [-math.inf] * 3
    assert math.isnan(lsm[0][0]) and lsm[0][1] == -math.inf  # inf - inf; the other member -inf
    assert all(math.isnan(v) for v in lsm[1][2:6])  # the whole NaN group
    assert lsm[2] == [-math.inf] * 9


def test_plus_inf_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    x = np.zeros((1, 9))
    x[0, 3] = np.inf
    with np.errstate(all="ignore"):
        for partition in ("level", "sibling"):
            a = group_logsumexp(x, PAPER, partition)
            b = group_logsumexp(torch.tensor(x), PAPER, partition).numpy()
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(
                group_log_softmax(x, PAPER, partition), group_log_softmax(torch.tensor(x), PAPER, partition).numpy()
            )


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_decoding_nan_rows_are_empty_paths(bad):
    big = Tree.from_parents([-1] + [0] * 200)  # wide: the sparse top-k route that crashed
    x = np.random.default_rng(0).normal(size=(3, 201))
    x[1, 7] = bad
    with np.errstate(all="ignore"):
        paths, lp = best_paths(x, big)
        tpaths, tlp = topk_paths(x, big, 3)
    assert paths[1].tolist() == [PAD, PAD] and math.isnan(lp[1])
    assert (tpaths[1] == PAD).all() and np.isnan(tlp[1]).all()
    assert (paths[[0, 2]] >= 0).all() and np.isfinite(tlp[[0, 2]]).all()


def test_decoding_nan_rows_torch():
    torch = pytest.importorskip("torch")
    x = torch.zeros(2, 9)
    x[0, 2] = float("nan")
    paths, lp = best_paths(x, PAPER, "sibling")
    tpaths, tlp = topk_paths(x, PAPER, 2, "sibling")
    assert paths[0].tolist() == [-1, -1, -1] and torch.isnan(lp[0])
    assert (tpaths[0] == -1).all() and torch.isnan(tlp[0]).all() and (tpaths[1] >= -1).all()


def test_decoding_minus_inf_is_probability_zero():
    x = np.zeros((1, 9))
    x[0, [0, 2, 3]] = -np.inf  # dog's subtree masked: the answer must be under cat
    paths, lp = best_paths(x, PAPER, "sibling")
    assert paths[0, 0] == 1 and np.isfinite(lp[0])


@pytest.mark.parametrize("k", [1.5, "2", True])
def test_topk_refuses_non_integer_k(k):
    with pytest.raises(TypeError, match="k must be an integer"):
        topk_paths(np.zeros((1, 9)), PAPER, k)


# ---------------------------------------------------------------------------- metrics
def test_metrics_nan_pad_with_tree():
    tree = Tree.from_edges([("dog", "animal"), ("cat", "animal")])
    y_true = np.array([["animal", "dog"], ["animal", np.nan]], dtype=object)
    y_pred = np.array([["animal", np.nan], ["animal", np.nan]], dtype=object)
    assert hierarchical_recall_score(y_true, y_pred, tree) == pytest.approx(2 / 3)


def test_metrics_huge_ids_named():
    with pytest.raises(ValueError, match="9223372036854775808 out of range"):
        hierarchical_f1_score(np.array([2, 5]), np.array([2**63, 5], dtype=np.uint64), PAPER, input_type="ids")


@pytest.mark.parametrize("beta", [math.inf, 1e200])
def test_fbeta_infinite_beta_is_recall(beta):
    y_true, y_pred = [[1, 2]], [[1, 3]]
    assert hierarchical_fbeta_score(y_true, y_pred, beta=beta) == hierarchical_recall_score(y_true, y_pred) == 0.5


def test_report_omits_levels_nothing_reaches():
    tree = Tree.from_dict({"a": {"b": {"c": {"d": None}}}, "e": None})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = hierarchical_classification_report(["a", "e"], ["b", "e"], tree)
    assert "level 2 and level 3: omitted, no true label and no prediction reaches them" in text
    assert "level 1" in text and "       level 2  " not in text


# ---------------------------------------------------------------------------- command line
@pytest.mark.parametrize(
    "argv, message",
    [
        (["tree", "missing.npz"], "No such file or directory: missing.npz"),
        (["tree", "--root", "nope.n.01"], "1 label is not a class of the tree: 'nope.n.01'"),
        (["demo", "--device", "nonsense"], "device='nonsense' is not a torch device"),
        (["tree", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_cli_errors_are_one_line(argv, message):
    done = subprocess.run([sys.executable, "-m", "hiclass_parallel", *argv], capture_output=True, text=True)
    assert done.returncode == 2
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hiclass-parallel: error: ") and message in err[0]
    assert "Traceback" not in done.stderr


def test_cli_debug_shows_traceback_and_version():
    done = subprocess.run([sys.executable, "-m", "hiclass_parallel", "--debug", "tree", "missing.npz"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" in done.stderr and "FileNotFoundError" in done.stderr
    from hiclass_parallel import __version__

    done = subprocess.run([sys.executable, "-m", "hiclass_parallel", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"hiclass-parallel {__version__}"


def test_cli_device_cuda_without_gpu(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from hiclass_parallel.cli import main

    assert main(["demo", "--device", "cuda"]) == 2
    assert "device='cuda' but torch" in capsys.readouterr().err


def test_tree_command_reports_the_readme_buffers(capsys):
    from hiclass_parallel.cli import main

    assert main(["tree"]) == 0
    out = capsys.readouterr().out
    assert "host arrays 12.71 MB in all" in out and "tree buffers\"): 10.35 MB" in out


# ---------------------------------------------------------------------------- datasets
def test_wordnet_glosses_give_the_tree_with_return_x_y():
    from hiclass_parallel.datasets import load_wordnet_glosses

    X, y, tree = load_wordnet_glosses("dog.n.01", return_X_y=True, return_tree=True)
    assert len(X) == 188 and tree.n_classes == 189 and set(tree.to_ids(y).tolist()) <= set(range(189))
    with pytest.raises(ValueError, match="return_tree=True goes with return_X_y=True"):
        load_wordnet_glosses("dog.n.01", return_tree=True)


# ---------------------------------------------------------------------------- classifier
@pytest.fixture(scope="module")
def data():
    from hiclass_parallel.datasets import make_hierarchical_classification

    return make_hierarchical_classification(n_samples=200, n_features=5, branching=2, depth=2, random_state=0)


def _clf(tree, **kw):
    from hiclass_parallel.estimators import HierarchicalClassifier

    kw = {"max_epochs": 2, "random_state": 0, "module__hidden_units": 8, **kw}
    return HierarchicalClassifier(tree, **kw)


def test_diverging_training_raises_named_error(data, one_torch_thread):
    torch = pytest.importorskip("torch")
    from hiclass_parallel.estimators._guards import NonFiniteLossError

    X, y, tree = data
    clf = _clf(tree, optimizer=torch.optim.SGD, lr=10.0, batch_size=32, max_epochs=8, module__hidden_units=256)
    with pytest.raises(NonFiniteLossError, match=r"loss became nan at epoch \d+, batch \d+ \(lr=10.0\).*Lower lr"):
        clf.fit(X, y)
    assert not hasattr(clf, "net_")  # a failed first fit leaves an unfitted estimator


def test_diverging_continued_training_puts_the_last_finite_weights_back(data, one_torch_thread):
    torch = pytest.importorskip("torch")
    from hiclass_parallel.estimators._guards import NonFiniteLossError

    X, y, tree = data
    clf = _clf(tree, optimizer=torch.optim.SGD, lr=1e-3, batch_size=32, module__hidden_units=256).fit(X, y)
    before = {k: v.clone() for k, v in clf.net_.module_.state_dict().items()}
    clf.set_params(lr=10.0, max_epochs=8, warm_start=True)
    with pytest.raises(NonFiniteLossError, match="were put back"):
        clf.fit(X, y)
    after = clf.net_.module_.state_dict()
    assert all(torch.isfinite(v).all() for v in after.values())
    # restored to the start of the diverging epoch: finite, and not the weights of the first fit
    # only if an earlier epoch of the continued run completed
    assert set(after) == set(before)


def test_exploding_finite_loss_warns(data, one_torch_thread):
    X, y, tree = data
    with pytest.warns(RuntimeWarning, match="training loss grew from .* training is diverging"):
        _clf(tree, lr=1e3, batch_size=32, max_epochs=8).fit(X * 1e3, y)


def test_failed_refit_keeps_the_fitted_model(data, one_torch_thread):
    X, y, tree = data
    clf = _clf(tree).fit(X, y)
    before = clf.predict(X[:5])
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        clf.fit(X[:, :3], y[:5])
    assert clf.n_features_in_ == 5 and hasattr(clf, "net_")
    assert np.array_equal(clf.predict(X[:5]), before)


@pytest.mark.parametrize(
    "device, message",
    [("nonsense", "device='nonsense' is not a torch device"), ("cuda:99", "device='cuda:99'")],
)
def test_bad_device_named(data, device, message):
    torch = pytest.importorskip("torch")
    if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 99:
        pytest.skip("a machine with 100 GPUs")
    X, y, tree = data
    with pytest.raises(ValueError, match=message):
        _clf(tree, device=device).fit(X, y)


@pytest.mark.parametrize("hidden, error", [(-1, ValueError), (1.5, TypeError), ([8, 0], ValueError)])
def test_bad_hidden_units_named(data, hidden, error):
    X, y, tree = data
    with pytest.raises(error, match="module__hidden_units"):
        _clf(tree, module__hidden_units=hidden).fit(X, y)


def test_warm_start_warns_about_ignored_changes(data, one_torch_thread):
    X, y, tree = data
    clf = _clf(tree, warm_start=True).fit(X, y)
    clf.set_params(module__hidden_units=16)
    with pytest.warns(UserWarning, match="module__hidden_units changed .* ignored"):
        clf.fit(X, y)
    from skorch.callbacks import EpochTimer

    clf.set_params(module__hidden_units=8, callbacks=[EpochTimer()])
    with pytest.warns(UserWarning, match="^callbacks changed"):
        clf.fit(X, y)
    clf.set_params(callbacks=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        clf.fit(X, y)  # back to the settings the network was built with: no warning


def test_empty_path_is_the_pad_label(data, one_torch_thread):
    X, y, tree = data
    clf = _clf(tree, decoding="threshold", threshold=1.0).fit(X, y)
    assert clf.predict_node(X[:3]).tolist() == [-1, -1, -1]
    assert clf.predict_labels(X[:3]).tolist() == ["", "", ""]  # not classes_[-1]


def test_nan_weights_are_a_named_error_not_empty_paths(data, one_torch_thread):
    from hiclass_parallel.estimators._guards import DivergedError

    torch = pytest.importorskip("torch")
    X, y, tree = data
    clf = _clf(tree).fit(X, y)
    with torch.no_grad():
        next(clf.net_.module_.parameters()).fill_(float("nan"))
    for call in (lambda: clf.predict_labels(X[:3]), lambda: clf.predict(X[:3]), lambda: clf.predict_top_k(X[:3], k=2)):
        with pytest.raises(DivergedError, match=r"3 of 3 sample\(s\) of finite input got NaN or infinite scores"):
            call()


def test_predict_top_k_refuses_non_integer_k(data, one_torch_thread):
    X, y, tree = data
    clf = _clf(tree).fit(X, y)
    with pytest.raises(TypeError, match="k must be an integer"):
        clf.predict_top_k(X[:2], k=1.5)


@pytest.mark.parametrize("partition, semantics", [("level", "partial"), ("sibling", "partial"), ("sibling", "terminal")])
def test_predict_answer_proba_sums_to_one(data, one_torch_thread, partition, semantics):
    X, y, tree = data
    clf = _clf(tree, partition=partition, semantics=semantics).fit(X, y)
    proba = clf.predict_answer_proba(X[:20])
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    if semantics == "partial":
        assert (proba[:, ~tree.is_leaf] == 0).all()
        assert np.array_equal(proba.argmax(1), clf.predict_node(X[:20]))
    # predict_proba's convention: a row sums to the number of groups, not 1
    assert np.allclose(clf.predict_proba(X[:3]).sum(1), tree.n_groups(partition), rtol=1e-4)


def test_internal_labels_suggest_terminal(data, one_torch_thread):
    X, y, tree = data
    internal = tree.labels[~tree.is_leaf]
    y_internal = internal[np.arange(len(X)) % internal.size]
    with pytest.warns(UserWarning, match="every label in y is an internal node.*semantics='terminal'"):
        _clf(tree, max_epochs=1).fit(X, y_internal)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _clf(tree, max_epochs=1, semantics="terminal").fit(X, y_internal)
