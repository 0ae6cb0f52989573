"""The text benchmark's plumbing on a tiny subset: same split for every method, library metrics,
unseen-target scoring, peers that cannot fit are skipped with the reason. Timings are never
asserted (DESIGN.md section 4)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import bench_text


def test_unseen_targets_are_scored_apart(paper_tree):
    y_train = np.array([6, 7, 3])
    y_test = np.array([6, 8, 4])  # 8 and 4 never occur as training targets
    pred = np.asarray(paper_tree.paths, dtype=np.int64)[np.array([6, 7, 4])]
    out = bench_text.score_text(paper_tree, y_train, y_test, pred)
    assert out["unseen_fraction"] == 2 / 3
    # unseen rows: 8 predicted as its sibling 7 (2 of 3 ancestors shared), 4 exact -> micro hF1 (2 + 2) / (3 + 2)
    assert abs(out["hf1_unseen"] - 4 / 5) < 1e-12
    assert out["exact"] == 2 / 3


def test_end_to_end_on_a_small_subtree(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_text, "FLAT_LIMIT_BYTES", 1)  # forces the "cannot run" reason for sgd
    args = bench_text.parse_args(["--subsets", "dog", "--methods", "hc-text,hc-text-classtext,sgd,xr-linear", "--threads", "1",
                                  "--work", str(tmp_path / "work"), "--out", str(tmp_path / "report.json")])
    monkeypatch.delenv("PECOS_PYTHON", raising=False)
    report = bench_text.run(args)
    results = report["subsets"]["dog"]["results"]
    ours = results["hc-text"]
    assert ours["status"] == "ok", ours.get("error")
    assert ours["n_epochs_"] == 16  # 150 rows in batches of 32: 5 steps per epoch, round(35 / sqrt(5))
    assert results["hc-text-classtext"]["status"] == "ok", results["hc-text-classtext"].get("error")
    # scored by the library's metric on the worker's own predictions and the saved split
    from hiclass_parallel import Tree
    from hiclass_parallel.metrics import hierarchical_f1_score

    work = tmp_path / "work" / "dog"
    tree = Tree.from_parents(np.load(work / "parents.npy"))
    pred = np.load(work / "hc-text" / "pred.npy")
    true = np.asarray(tree.paths)[np.load(work / "y_test.npy")]
    assert ours["hf1"] == float(hierarchical_f1_score(true, pred, tree, input_type="ids"))
    assert ours["peak_rss_mib"] > 100  # a whole torch process, data included
    assert results["sgd"]["status"] == "skipped" and "GiB" in results["sgd"]["reason"]
    assert results["xr-linear"]["status"] == "skipped" and "PECOS_PYTHON" in results["xr-linear"]["reason"]
    assert "| hc-text |" in bench_text.markdown(report)


def test_cut_to_depth_relabels_deep_targets_and_keeps_their_paths():
    from hiclass_parallel import Tree

    # 0 -> 1 -> 2 -> 3 and 0 -> 4; ids shuffled by building from names in another order
    tree = Tree.from_edges([("d", "c"), ("a", None), ("e", "a"), ("b", "a"), ("c", "b")])
    ids = tree.to_ids(np.array(["d", "c", "e", "a"]))
    own = ids.copy()
    cut_tree, cut, cut_own = bench_text.cut_to_depth(tree, ids, own, depth=1)
    # targets deeper than 1 become their depth-1 ancestor; the cut tree holds only used paths
    assert cut_tree.to_labels(cut).tolist() == ["b", "b", "e", "a"]
    assert sorted(cut_tree.labels.tolist()) == ["a", "b", "e"]
    assert cut_tree.n_levels == 2
    # a row's own synset outside the cut tree is -1, inside it keeps its (new) id
    assert cut_own[0] == -1 and cut_own[1] == -1
    assert cut_tree.to_labels(cut_own[2:]).tolist() == ["e", "a"]
