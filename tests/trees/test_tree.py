"""Tree: constructors, derived arrays (the paper's M_lc and P_cl), validation, io."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hiclass_parallel import PAD, Tree, TreeError, UnknownLabelError

PAPER = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])  # the paper's tree, for the probes below

# The paper's matrices (eq. M_lc and P_cl), with class ids shifted down by one.
PAPER_MASK = np.array([
    [0, 0, 1, 1, 1, 1, 1, 1, 1],
    [1, 1, 0, 0, 0, 0, 1, 1, 1],
    [1, 1, 1, 1, 1, 1, 0, 0, 0],
], dtype=bool)
PAPER_PATHS = np.array([
    [0, -1, -1], [1, -1, -1], [0, 2, -1], [0, 3, -1], [1, 4, -1],
    [1, 5, -1], [0, 3, 6], [0, 3, 7], [0, 3, 8],
])


def test_paper_tree_encoding(paper_tree):
    assert paper_tree.n_classes == 9 and paper_tree.n_levels == 3
    np.testing.assert_array_equal(paper_tree.mask, PAPER_MASK)
    np.testing.assert_array_equal(paper_tree.paths, PAPER_PATHS)
    np.testing.assert_array_equal(paper_tree.depth, [0, 0, 1, 1, 1, 1, 2, 2, 2])
    assert paper_tree.leaves.tolist() == [2, 4, 5, 6, 7, 8]
    assert paper_tree.children(3).tolist() == [6, 7, 8]
    assert paper_tree.children(-1).tolist() == [0, 1]
    assert repr(paper_tree) == "Tree(n_classes=9, n_levels=3, n_leaves=6)"
    # The paper's two partitions: (1, 2) (3, 4, 5, 6) (7, 8, 9) and (1, 2) (3, 4) (5, 6) (7, 8, 9).
    assert paper_tree.groups("level").tolist() == [0, 0, 1, 1, 1, 1, 2, 2, 2]
    assert paper_tree.groups("sibling").tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 3]
    assert paper_tree.group_parents().tolist() == [-1, 0, 1, 3]


def test_arrays_are_read_only_and_compact(paper_tree):
    for name in ("parents", "depth", "mask", "paths"):
        array = getattr(paper_tree, name)
        assert not array.flags.writeable, name
        with pytest.raises(ValueError):
            array[0] = 0
    assert paper_tree.paths.dtype == np.int32 and paper_tree.mask.dtype == bool


def test_all_constructors_agree(paper_parents, paper_names):
    names = paper_names
    by_parents = Tree.from_parents(paper_parents, labels=names)
    edges = [(names[c], None if p < 0 else names[p]) for c, p in enumerate(paper_parents)]
    by_edges = Tree.from_edges(edges)
    by_paths = Tree.from_paths([[names[i] for i in row if i >= 0] for row in PAPER_PATHS])
    nested = {"dog": {"small dog": None, "big dog": ["happy big dog", "moody big dog", "Hound of Hades"]},
              "cat": ["sleepy cat", "curious cat"]}
    by_dict = Tree.from_dict(nested)
    for other in (by_edges, by_paths, by_dict):
        # Ids may differ between constructors; the label -> path relation may not.
        for label in names:
            assert other.path_labels(label) == by_parents.path_labels(label)
    assert by_edges == by_parents  # edges listed in id order keep the ids


def test_from_networkx():
    nx = pytest.importorskip("networkx", reason="networkx is an optional extra")
    graph = nx.DiGraph([("animal", "dog"), ("animal", "cat"), ("dog", "puppy")])
    tree = Tree.from_networkx(graph)
    assert tree.to_labels(tree.paths[tree.to_ids(["puppy"])[0]]).tolist() == ["animal", "dog", "puppy"]
    graph.add_edge("cat", "puppy")
    with pytest.raises(TreeError, match="'puppy' has 2 parents"):
        Tree.from_networkx(graph)


def test_from_paths_with_pad():
    tree = Tree.from_paths(np.array([["a", "b"], ["a", ""], ["c", ""]], dtype=object), pad="")
    assert tree.labels.tolist() == ["a", "b", "c"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Tree.from_parents([1, 2, 0]), "cycle through node 0, 1, 2"),
        (lambda: Tree.from_parents([-1, 2, 1]), "cycle through node 1, 2"),
        (lambda: Tree.from_parents([-1, 5]), r"unknown parent for node 1: parent ids 5"),
        (lambda: Tree.from_parents([]), "empty"),
        (lambda: Tree.from_parents([-1, 0], labels=["a", "a"]), "duplicate labels: 'a'"),
        (lambda: Tree.from_parents([-1, 0], labels=["a"]), "got 1 labels for 2 parents"),
        (lambda: Tree.from_edges([("dog", "animal"), ("dog", "pet")]), "'dog' has two parents: 'animal' and 'pet'"),
        (lambda: Tree.from_edges([]), "empty"),
        # a name under two parents is two classes in paths (test_labels_as_users_have_them.py)
        (lambda: Tree.from_edges([("b", "a"), ("b", "c")]), r"'b' has two parents.*Tree\.from_paths"),
        (lambda: Tree.from_paths(["a/b"]), r"path 0 is a string \('a/b'\): pass sep="),
        (lambda: Tree.from_paths(["a//b"], sep="/"), r"path 0 \('a//b'\) has an empty name"),
        (lambda: Tree.from_paths([["a/b", "c"]], sep="/"), r"the name 'a/b', which holds the separator '/'"),
        (lambda: Tree.from_parents([-1, 0, 0], names=["a", "b", "b"]), "nodes 1 and 2 are both named 'b' under 'a'"),
        (lambda: Tree.from_dict({"a": 3}), "children of 'a'"),
        (lambda: Tree.from_parents([[-1]]), "1-D"),
        (lambda: Tree.from_parents([-1.0, 0.0]), "integer"),
        # None pads y, so a class named None could never be predicted apart from a missing level (D13)
        (lambda: Tree.from_edges([("dog", "animal"), (None, "animal")]), r"edge \(None, 'animal'\): None cannot be a class label"),
        (lambda: Tree.from_edges([(None, None)]), r"edge \(None, None\): None cannot be a class label"),
        (lambda: Tree.from_parents([-1, 0], labels=["a", None]), r"label 1 is None"),
        (lambda: Tree.from_dict({"a": {None: None}}), r"edge \(None, 'a'\): None cannot be a class label"),
    ],
)
def test_bad_trees_name_the_problem(make, message):
    with pytest.raises(TreeError, match=message):
        make()


def test_cycle_in_large_tree_is_found_fast():
    parents = np.arange(-1, 199_999)
    parents[0] = 199_999  # closes one long cycle through every node
    with pytest.raises(TreeError, match="cycle"):
        Tree.from_parents(parents)


def test_label_mapping_and_unknown_labels(paper_parents, paper_names):
    tree = Tree.from_parents(paper_parents, labels=paper_names)
    assert tree.to_ids(["cat", "Hound of Hades"]).tolist() == [1, 8]
    assert tree.to_ids(np.array([["cat"], ["dog"]], dtype=object)).shape == (2, 1)
    with pytest.raises(UnknownLabelError, match="2 labels are not a class of the tree: 'cow', 'pig'"):
        tree.to_ids(["dog", "cow", "pig", "cow"])
    with pytest.raises(KeyError):
        tree.to_ids(["cow"])
    with pytest.raises(IndexError, match="node ids 9 are out of range"):
        tree.to_labels([9])
    int_tree = Tree.from_parents([-1, 0, 0], labels=[100, 7, 55])
    assert int_tree.to_ids(np.array([55, 100])).tolist() == [2, 0]
    with pytest.raises(UnknownLabelError, match="8"):
        int_tree.to_ids([8])
    default = Tree.from_parents([-1, 0])
    with pytest.raises(UnknownLabelError, match="-1"):
        default.to_ids([-1])


def test_subtree(paper_tree, paper_parents, paper_names):
    named = Tree.from_parents(paper_parents, labels=paper_names)
    sub = named.subtree("big dog")
    assert sub.labels.tolist() == ["big dog", "happy big dog", "moody big dog", "Hound of Hades"]
    assert sub.parents.tolist() == [-1, 0, 0, 0]
    assert named.subtree("dog", include_root=False).labels.tolist() == ["small dog", "big dog", "happy big dog",
                                                                        "moody big dog", "Hound of Hades"]
    with pytest.raises(TreeError, match="leaf"):
        named.subtree("small dog", include_root=False)
    with pytest.raises(UnknownLabelError):
        named.subtree("cow")


def test_save_load_pickle_roundtrip(tmp_path, paper_parents, paper_names):
    for tree in (Tree.from_parents(paper_parents), Tree.from_parents(paper_parents, labels=paper_names),
                 Tree.from_parents([-1, 0, 0], labels=[100, 7, 55])):
        path = tmp_path / "tree.npz"
        tree.save(path)
        loaded = Tree.load(path)
        assert loaded == tree
        assert loaded.labels.dtype == tree.labels.dtype
        assert type(loaded.labels[0]) is type(tree.labels[0])
        assert pickle.loads(pickle.dumps(tree)) == tree
    assert Tree.from_parents([-1, 0]) != Tree.from_parents([-1, -1])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60))
def test_tree_properties(seed, n, random_tree, tmp_path_factory):
    tree = random_tree(seed, n)
    paths, depth, parents = tree.paths, tree.depth, tree.parents
    for c in range(tree.n_classes):
        # Every path is its parent's path plus itself.
        expected = paths[parents[c]].copy() if parents[c] >= 0 else np.full(tree.n_levels, PAD)
        expected[depth[c]] = c
        np.testing.assert_array_equal(paths[c], expected)
    # Every class is unmasked at exactly one level: its own depth.
    assert (~tree.mask).sum(axis=0).tolist() == [1] * tree.n_classes
    assert (np.argmin(tree.mask, axis=0) == depth).all()
    # No two classes of one ancestral path share a partition group.
    for partition in ("level", "sibling"):
        groups = tree.groups(partition)
        for c in range(tree.n_classes):
            on_path = paths[c][paths[c] >= 0]
            assert len(set(groups[on_path].tolist())) == on_path.size
    path = tmp_path_factory.mktemp("io") / "t.npz"
    tree.save(path)
    assert Tree.load(path) == tree


def test_memory_at_wordnet_scale():
    # A random tree of WordNet's size: 117,659 classes in 20 levels (a spine of 20 levels,
    # the rest hung under random nodes of depth < 19).
    rng = np.random.default_rng(0)
    n, n_levels = 117_659, 20
    parents = np.full(n, -1, dtype=np.int64)
    parents[1:n_levels] = np.arange(n_levels - 1)
    depth = np.zeros(n, dtype=np.int64)
    depth[:n_levels] = np.arange(n_levels)
    for i in range(n_levels, n, 10_000):  # vectorised in blocks: parents come from earlier blocks
        stop = min(i + 10_000, n)
        pool = np.flatnonzero(depth[:i] < n_levels - 1)
        parents[i:stop] = rng.choice(pool, stop - i)
        depth[i:stop] = depth[parents[i:stop]] + 1
    tree = Tree.from_parents(parents)
    assert tree.n_levels == n_levels
    # Mask and paths: well under the paper's 40 MB.
    assert tree.mask.nbytes + tree.paths.nbytes < 12e6


# ---------------------------------------------------------------------------- bad and extreme input
# Regression probes: each once gave a wrong result, a bare crash or a misleading error; each
# asserts the correct result or the named error now.
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


def test_load_refuses_files_of_the_unreleased_str_format_by_name(tmp_path):
    np.savez(tmp_path / "old.npz", parents=np.array([-1, 0], dtype=np.int32), labels=np.array(["a", "b"]),
             label_kind=np.asarray("str"))
    with pytest.raises(TreeError, match="old.npz.*labels are of kind 'str', written by an unreleased version"):
        Tree.load(tmp_path / "old.npz")
