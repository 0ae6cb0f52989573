"""Reading labels and label paths (``labels/_paths``): right-padding, path strings split on
``path_sep``, label paths walked down the tree (a name under two parents is two classes), the
separator guessed from the labels, and the errors that name the offending row or name."""

from __future__ import annotations

import numpy as np
import pytest

from hiclass_parallel import Tree
from hiclass_parallel.labels._paths import (
    check_names_free_of_sep,
    guess_path_sep,
    labels_to_ids,
    learn_tree,
    path_strings,
    read_path_strings,
    right_pad,
    split_path_strings,
)

#: A name under two parents: ``Accessories`` is two classes.
PATHS = [["Electronics", "Accessories"], ["Clothing", "Accessories"], ["Clothing", "Shoes", "Boots"]]


@pytest.fixture
def shop() -> Tree:
    return Tree.from_paths(PATHS)


def test_right_pad_pads_each_row_to_the_longest_with_the_pad_given():
    rows = [("a", "b", "c"), ["d"], np.array(["e", "f"], dtype=object)]
    out = right_pad(rows, None)
    assert out.dtype == object and out.shape == (3, 3)
    assert out.tolist() == [["a", "b", "c"], ["d", None, None], ["e", "f", None]]
    assert right_pad([[1], [2, 3]], -1).tolist() == [[1, -1], [2, 3]]
    assert right_pad([], "").shape == (0, 0)
    assert rows[1] == ["d"]  # the caller's rows are not padded in place


def test_path_strings_are_split_on_the_separator_and_right_padded():
    values = np.array(["a/b/c", "a", "d/e"], dtype=object)
    assert split_path_strings(values, "/", "").tolist() == [["a", "b", "c"], ["a", "", ""], ["d", "e", ""]]
    assert split_path_strings(np.array(["a > b"], dtype=object), " > ", None).tolist() == [["a", "b"]]
    with pytest.raises(ValueError, match=r"path_sep='/'.*rows 1, 3 are not strings: 7, None"):
        split_path_strings(np.array(["a/b", 7, "c", None], dtype=object), "/", "")


def test_path_strings_of_a_tree_join_its_names(shop):
    strings = path_strings(shop, " > ")
    assert sorted(strings.tolist()) == sorted(["Electronics", "Electronics > Accessories", "Clothing",
                                               "Clothing > Accessories", "Clothing > Shoes",
                                               "Clothing > Shoes > Boots"])
    assert path_strings(shop, " > ") is strings  # made once per tree and separator


def test_read_path_strings_splits_only_where_the_labels_are_not_the_path_strings(shop):
    values = np.array(["Clothing/Accessories", "Electronics"], dtype=object)
    split = read_path_strings(values, shop, "/", "")
    assert split.tolist() == [["Clothing", "Accessories"], ["Electronics", ""]]
    assert read_path_strings(values, shop, None, "") is values  # no separator: labels as they are
    learnt = Tree.from_paths(["Clothing/Accessories", "Electronics/Accessories"], sep="/")
    assert read_path_strings(values, learnt, "/", "") is values  # the labels are path strings: one look-up


def test_label_paths_walk_down_the_tree_to_the_class_under_the_rows_own_parent(shop):
    ids = labels_to_ids([["Electronics", "Accessories"], ["Clothing", "Accessories"], ["Clothing"]], shop, None)
    assert ids.dtype == np.int64
    assert [shop.labels[i] for i in ids] == [("Electronics", "Accessories"), ("Clothing", "Accessories"),
                                             ("Clothing",)]
    ragged = labels_to_ids([["Clothing", "Shoes", "Boots"], ["Electronics"]], shop, None)
    assert shop.names[ragged].tolist() == ["Boots", "Electronics"] and shop.depth[ragged].tolist() == [2, 0]


def test_label_paths_that_are_not_paths_of_the_tree_are_refused_by_row():
    tree = Tree.from_paths([["a", "b", "c"], ["d", "e"]])
    with pytest.raises(ValueError, match=r"rows 1 have a pad label None before a label"):
        labels_to_ids(np.array([["a", "b", None], ["a", None, "c"]], dtype=object), tree, None)
    with pytest.raises(ValueError, match=r"4 columns but the tree has 3 levels: rows 0 go deeper"):
        labels_to_ids(np.array([["a", "b", "c", "x"], ["d", None, None, None]], dtype=object), tree, None)
    with pytest.raises(ValueError, match=r"rows 0 are empty"):
        labels_to_ids(np.array([[None, None], ["d", "e"]], dtype=object), tree, None)
    with pytest.raises(ValueError, match=r"not ancestral paths of the tree \(rows 1\)"):
        labels_to_ids(np.array([["a", "b"], ["d", "b"]], dtype=object), tree, None)


def test_the_separator_is_guessed_from_most_labels_the_most_specific_first():
    assert guess_path_sep(["a > b", "a > c", "d"]) == " > "  # not ">" although ">" is held too
    assert guess_path_sep(["a/b", "c/d", "e|f"]) == "/"
    assert guess_path_sep(["a/b", "c", "d", "e"]) is None  # one label of four holds it
    assert guess_path_sep(["a/b", "a/b"]) is None  # fewer than two distinct labels
    assert guess_path_sep([1, 2, 3]) is None


def test_a_name_holding_the_separator_is_named(shop):
    check_names_free_of_sep(shop, "/")
    tree = Tree.from_paths([["a", "b/c"], ["d"]])
    with pytest.raises(ValueError, match=r"the tree's name 'b/c' \(node 1\) holds it"):
        check_names_free_of_sep(tree, "/")


def test_a_tree_learnt_from_path_strings_is_labelled_by_them_in_order_of_first_appearance():
    tree, pad = learn_tree(np.array(["x/y", "x", "z/y", "x/y"], dtype=object), sep="/")
    assert pad == "" and tree.labels.tolist() == ["x", "x/y", "z", "z/y"]
    assert tree.names.tolist() == ["x", "y", "z", "y"]
    with pytest.raises(ValueError, match="path_sep must be a non-empty string"):
        learn_tree(["x/y"], sep="")
    with pytest.raises(ValueError, match=r"rows 1 are not strings"):
        learn_tree(np.array(["x/y", 3], dtype=object), sep="/")
