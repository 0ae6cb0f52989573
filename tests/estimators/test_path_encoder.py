"""PathEncoder: labels at any depth <-> ancestral paths of node ids, on host and device."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from sklearn.base import clone

from hiclass_parallel import Tree, UnknownLabelError
from hiclass_parallel.estimators import PathEncoder

# The paper's Figure 1 tree with node ids shuffled: ids are not sorted by depth.
PARENTS = [-1, -1, 0, 0, 1, 1, 3, 3, 3]
PERM = np.array([4, 7, 0, 8, 2, 5, 1, 6, 3])  # new id of old node i


def shuffled_tree(labels: str = "str") -> Tree:
    new_parents = np.empty(len(PARENTS), dtype=np.int64)
    for old, parent in enumerate(PARENTS):
        new_parents[PERM[old]] = -1 if parent < 0 else PERM[parent]
    if labels == "ids":
        return Tree.from_parents(new_parents)
    names = {"str": [f"n{i}" for i in range(len(PARENTS))], "int": [100 + 10 * i for i in range(len(PARENTS))]}[labels]
    return Tree.from_parents(new_parents, labels=names)


@pytest.mark.parametrize("labels", ["str", "int", "ids"])
def test_transform_gives_the_tree_paths_of_every_label(labels):
    tree = shuffled_tree(labels)
    ids = np.arange(tree.n_classes)[::-1]
    enc = PathEncoder(tree).fit(tree.labels[ids])
    paths = enc.transform(tree.labels[ids])
    assert paths.dtype == np.int64 and paths.shape == (tree.n_classes, tree.n_levels)
    np.testing.assert_array_equal(paths, tree.paths[ids])
    np.testing.assert_array_equal(enc.inverse_transform(paths), tree.labels[ids])
    assert enc.n_levels_ == 3 and enc.classes_ is tree.labels


def test_labels_at_any_depth_and_label_paths_agree():
    tree = Tree.from_dict({"animal": {"dog": ["puppy"], "cat": None}, "plant": None})
    enc = PathEncoder(tree).fit(["puppy"])
    by_label = enc.transform(["puppy", "cat", "plant", "dog"])
    by_path = enc.transform(
        [["animal", "dog", "puppy"], ["animal", "cat", ""], ["plant", "", ""], ["animal", "dog", ""]]
    )
    ragged = enc.transform([["animal", "dog", "puppy"], ["animal", "cat"], ["plant"], ["animal", "dog"]])
    np.testing.assert_array_equal(by_label, by_path)
    np.testing.assert_array_equal(by_label, ragged)
    # None pads and narrower arrays work too; numpy string arrays as well.
    np.testing.assert_array_equal(enc.transform(np.array([["plant", None]], dtype=object)), by_label[2:3])
    np.testing.assert_array_equal(enc.transform(np.array(["cat", "plant"])), by_label[1:3])


def test_learns_the_tree_from_label_paths():
    y = [["animal", "dog", "puppy"], ["animal", "cat", ""], ["plant", "", ""]]
    enc = PathEncoder().fit(y)
    assert enc.tree_.labels.tolist() == ["animal", "dog", "puppy", "cat", "plant"]
    assert enc.pad_label_ == ""
    np.testing.assert_array_equal(enc.transform(y), [[0, 1, 2], [0, 3, -1], [4, -1, -1]])

    ints = PathEncoder().fit(np.array([[5, 7], [5, -1], [6, 8]]))
    assert ints.tree_.labels.tolist() == [5, 7, 6, 8] and ints.pad_label_ == -1
    np.testing.assert_array_equal(ints.transform([7, 6]), [[0, 1], [2, -1]])

    custom = PathEncoder(pad_label="-").fit([["a", "b"], ["a", "-"]])
    assert custom.tree_.labels.tolist() == ["a", "b"]


def test_a_flat_y_without_a_tree_is_a_clear_error():
    with pytest.raises(ValueError, match="tree can only be learnt from label paths"):
        PathEncoder().fit(["dog", "cat"])


def test_unknown_labels_are_named():
    tree = shuffled_tree()
    with pytest.raises(UnknownLabelError, match="'cow'"):
        PathEncoder(tree).fit(["n1", "cow"])
    enc = PathEncoder(tree).fit(["n1"])
    with pytest.raises(UnknownLabelError, match="'horse', 'cow'"):
        enc.transform(["horse", "n2", "cow"])
    with pytest.raises(UnknownLabelError, match="'cow'"):
        enc.transform([["n0", "cow"]])


def test_broken_label_paths_are_named():
    tree = Tree.from_dict({"animal": {"dog": ["puppy"], "cat": None}, "plant": None})
    enc = PathEncoder(tree).fit(["dog"])
    with pytest.raises(ValueError, match=r"not ancestral paths of the tree \(rows 1\).*'plant', 'cat'"):
        enc.transform([["animal", "cat"], ["plant", "cat"]])
    with pytest.raises(ValueError, match="pad label '' before a label"):
        enc.transform([["animal", "", "puppy"]])
    with pytest.raises(ValueError, match="rows 0 are empty"):
        enc.transform([["", ""]])
    with pytest.raises(ValueError, match="go deeper than the tree"):
        enc.transform([["animal", "dog", "puppy", "paw"]])
    with pytest.raises(ValueError, match="1-D .* or 2-D"):
        enc.transform(np.zeros((2, 2, 2), dtype=object))


def test_inverse_transform_checks_its_paths():
    tree = shuffled_tree()
    enc = PathEncoder(tree).fit(["n0"])
    with pytest.raises(ValueError, match="not ancestral paths"):
        enc.inverse_transform([[int(PERM[0]), int(PERM[4])]])  # n4 is a child of n1, not n0
    with pytest.raises(ValueError, match="right-padded"):
        enc.inverse_transform([[int(PERM[0]), -1, int(PERM[6])]])
    with pytest.raises(IndexError, match="out of range"):
        enc.inverse_transform([[99]])
    with pytest.raises(ValueError, match="2-D integer"):
        enc.inverse_transform([0, 1])


def test_pad_label_that_is_a_class_is_rejected():
    with pytest.raises(ValueError, match="pad_label 'a' is a label of the tree"):
        PathEncoder(Tree.from_paths([["a", "b"]]), pad_label="a").fit(["b"])


@pytest.mark.parametrize("labels", ["int", "ids"])
def test_torch_labels_stay_torch(labels):
    tree = shuffled_tree(labels)
    ids = np.array([6, 0, 3, 8])
    y = torch.as_tensor(tree.labels[ids])
    enc = PathEncoder(tree).fit(y)
    paths = enc.transform(y)
    assert isinstance(paths, torch.Tensor) and paths.dtype == torch.int64
    np.testing.assert_array_equal(paths.numpy(), tree.paths[ids])
    back = enc.inverse_transform(paths)
    assert isinstance(back, torch.Tensor)
    np.testing.assert_array_equal(back.numpy(), tree.labels[ids])
    # Label paths held in a tensor, padded with -1.
    label_paths = torch.as_tensor(np.where(tree.paths[ids] >= 0, tree.labels[tree.paths[ids]], -1))
    np.testing.assert_array_equal(enc.transform(label_paths).numpy(), tree.paths[ids])


def test_torch_errors():
    tree = shuffled_tree("int")
    enc = PathEncoder(tree).fit([100])
    with pytest.raises(UnknownLabelError, match="7, 9"):
        enc.transform(torch.tensor([7, 100, 9]))
    with pytest.raises(TypeError, match="must be integers"):
        enc.transform(torch.tensor([1.0]))
    with pytest.raises(TypeError, match="not integers"):
        PathEncoder(shuffled_tree("str")).fit(["n0"]).transform(torch.tensor([0]))
    with pytest.raises(ValueError, match="not ancestral paths"):
        PathEncoder(shuffled_tree("ids")).fit([0]).inverse_transform(torch.tensor([[int(PERM[0]), int(PERM[4])]]))


def test_string_labels_from_torch_paths_come_back_on_the_host():
    tree = shuffled_tree("str")
    enc = PathEncoder(tree).fit(["n6"])
    labels = enc.inverse_transform(torch.as_tensor(tree.paths[[6, 2]]).long())
    assert isinstance(labels, np.ndarray) and labels.tolist() == ["n6", "n2"]


def test_learning_from_torch_paths():
    enc = PathEncoder().fit(torch.tensor([[3, 4], [3, -1]]))
    assert enc.tree_.labels.tolist() == [3, 4]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)")
def test_cuda_tensors_stay_on_the_gpu():
    tree = shuffled_tree("int")
    y = torch.as_tensor(tree.labels[[6, 0]], device="cuda")
    enc = PathEncoder(tree).fit(y)
    paths = enc.transform(y)
    assert paths.device.type == "cuda"
    np.testing.assert_array_equal(paths.cpu().numpy(), tree.paths[[6, 0]])
    assert enc.inverse_transform(paths).device.type == "cuda"


def _cupy_or_skip():
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # ImportError, or CuPy without a usable GPU
        pytest.skip("needs CuPy and a CUDA device (none on this machine)")
    return cupy


@pytest.mark.gpu
def test_cupy_arrays_stay_on_the_gpu():
    cp = _cupy_or_skip()
    tree = shuffled_tree("int")
    y = cp.asarray(tree.labels[[6, 0]])
    enc = PathEncoder(tree).fit(y)
    paths = enc.transform(y)
    assert isinstance(paths, cp.ndarray)
    np.testing.assert_array_equal(paths.get(), tree.paths[[6, 0]])
    assert isinstance(enc.inverse_transform(paths), cp.ndarray)


def test_clone_and_pickle():
    enc = PathEncoder(shuffled_tree(), pad_label="-").fit(["n3"])
    assert clone(enc).get_params()["pad_label"] == "-"
    again = pickle.loads(pickle.dumps(enc))
    np.testing.assert_array_equal(again.transform(["n6"]), enc.transform(["n6"]))


def test_not_fitted():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        PathEncoder(shuffled_tree()).transform(["n0"])
