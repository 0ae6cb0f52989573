"""WordNet 3.0 shipped with the package: the paper's 117,659-class tree, the DAG of every
hypernym, and a gloss data set.

The file ``data/wordnet30.npz`` holds, for every synset of WordNet 3.0, its nltk name, its
parent under :data:`hiclass_parallel.datasets.build_wordnet.PARENT_RULE`, its other parents under
:data:`hiclass_parallel.datasets.build_wordnet.ALL_PARENTS_RULE`, its definition, its examples and
its lemma names. It is built by ``python -m hiclass_parallel.datasets.build_wordnet`` with
:func:`hiclass_parallel.datasets.build_wordnet.read_wordnet`; loading it needs neither nltk nor a network.
The WordNet licence, which allows this redistribution with its notice, is in
``data/WORDNET_LICENSE.txt``.

File format 2: an uncompressed ``.npz`` (no pickle) whose members are ``uint8`` arrays, each the
LZMA-compressed UTF-8 text of one field, one line per synset in class-id order:
``names``; ``parents`` (little-endian int32 bytes, not text); ``definitions``; ``examples``
(the examples of a synset separated by tabs); ``lemmas`` (separated by spaces); ``meta`` (JSON);
and, since format 2, ``extra_parents``: little-endian int32 ``(child, parent)`` id pairs, the
second and later parents of every synset under
:data:`hiclass_parallel.datasets.build_wordnet.ALL_PARENTS_RULE`, by child id and then in data-file
order (a synset's first parent is its entry in ``parents``). Format 1 lacked ``extra_parents``;
the other members are unchanged, byte for byte.
"""

from __future__ import annotations

import functools
import json
import lzma
import os
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils import Bunch

from ..dag import Dag
from ..tree import Tree

__all__ = ["WORDNET_FILE", "WORDNET_LICENSE_FILE", "load_wordnet_dag", "load_wordnet_glosses", "load_wordnet_tree"]

_DATA = Path(__file__).resolve().parent / "data"
WORDNET_FILE = _DATA / "wordnet30.npz"
"""Path of the shipped WordNet 3.0 file."""
WORDNET_LICENSE_FILE = _DATA / "WORDNET_LICENSE.txt"
"""Path of the WordNet licence that ships with it."""

_FORMAT = 2
_TEXT_FIELDS = ("names", "definitions", "examples", "lemmas")
_POS_NAMES = {"n": "nouns", "v": "verbs", None: "synsets"}


# --------------------------------------------------------------------------- the file
def _missing_file_error() -> FileNotFoundError:
    return FileNotFoundError(
        f"the shipped WordNet file {WORDNET_FILE} is missing: reinstall hiclass_parallel, or rebuild it "
        "with `python -m hiclass_parallel.datasets.build_wordnet` (needs nltk and WordNet 3.0 data)"
    )


@functools.cache
def _field(name: str) -> Any:
    """One field of the shipped file, decompressed once per process."""
    if not WORDNET_FILE.is_file():
        raise _missing_file_error()
    return _read_member(WORDNET_FILE, name)


def _read_member(path: str | os.PathLike, name: str) -> Any:
    """One field of a file written by :func:`_write_wordnet_file`, decoded."""
    with np.load(path, allow_pickle=False) as npz:
        if name not in npz.files:
            raise ValueError(f"{path} has no {name!r} member: it is an older format of the WordNet file; "
                             "rebuild it with `python -m hiclass_parallel.datasets.build_wordnet`")
        raw = lzma.decompress(npz[name].tobytes())
    if name in ("parents", "extra_parents"):
        ids = np.frombuffer(raw, dtype="<i4").astype(np.int32)
        ids = ids.reshape(-1, 2) if name == "extra_parents" else ids
        ids.flags.writeable = False
        return ids
    if name == "meta":
        return json.loads(raw)
    text = raw.decode("utf-8")
    lines = tuple(text.split("\n"))
    if name == "examples":
        return tuple(tuple(line.split("\t")) if line else () for line in lines)
    if name == "lemmas":
        return tuple(tuple(line.split(" ")) for line in lines)
    return lines


# --------------------------------------------------------------------------- the tree
@functools.lru_cache(maxsize=1)
def load_wordnet_tree() -> Tree:
    """The WordNet 3.0 tree of the paper: 117,659 synsets in 20 levels, from the package.

    Every synset (nouns, verbs, adjectives, adverbs) is a class labelled by its nltk name
    (``"dog.n.01"``), with one parent chosen by :data:`hiclass_parallel.datasets.build_wordnet.PARENT_RULE`
    (the first hypernym pointer in data-file order, else the first instance hypernym). The
    22,337 synsets without hypernyms (``entity.n.01``, most verbs' roots, all adjectives and
    adverbs) are top-level classes under the implicit root. Needs no nltk and no network;
    :func:`hiclass_parallel.datasets.build_wordnet.build_wordnet_tree` builds the same tree from WordNet files.
    :func:`load_wordnet_dag` keeps every hypernym instead.

    Returns
    -------
    Tree
        Loaded once per process (in a fraction of a second) and cached: every call returns
        the same immutable tree, so its device buffers are shared too.

    Examples
    --------
    >>> from hiclass_parallel.datasets import load_wordnet_tree
    >>> tree = load_wordnet_tree()
    >>> tree.n_classes, tree.n_levels
    (117659, 20)
    >>> dog = tree.paths[tree.to_ids(["dog.n.01"])[0]]
    >>> tree.to_labels(dog[dog >= 0]).tolist()[-4:]
    ['placental.n.01', 'carnivore.n.01', 'canine.n.02', 'dog.n.01']
    """
    return Tree.from_parents(_field("parents"), labels=_field("names"))


# --------------------------------------------------------------------------- the DAG
@functools.lru_cache(maxsize=1)
def _hypernyms() -> tuple[tuple[int, ...], ...]:
    """The parent ids of every synset under ALL_PARENTS_RULE, in data-file order."""
    lists: list[list[int]] = [[p] if p >= 0 else [] for p in _field("parents").tolist()]
    for child, parent in _field("extra_parents").tolist():
        if not lists[child]:  # pragma: no cover - guards a corrupt file
            raise ValueError(f"{WORDNET_FILE}: synset {child} has extra parents but no first parent")
        lists[child].append(parent)
    return tuple(tuple(ids) for ids in lists)


def _check_pos(pos: str | None) -> None:
    if pos not in _POS_NAMES:
        if pos in ("a", "s", "r"):
            raise ValueError(
                f"pos={pos!r}: WordNet gives adjectives and adverbs no hypernyms, so they have no parent "
                "to predict; use pos='n', 'v' or None"
            )
        raise ValueError(f"pos must be 'n', 'v' or None, got {pos!r}")


@functools.cache
def _dag_of(pos: str | None) -> Dag:
    dag = Dag(_field("names"), _hypernyms())
    return dag if pos is None else dag.subgraph(_pos_of(_field("names")) == pos)


def load_wordnet_dag(pos: str | None = None) -> Dag:
    """WordNet 3.0 with every hypernym: a :class:`~hiclass_parallel.dag.Dag` of its synsets.

    The same classes as :func:`load_wordnet_tree`, each with *all* its parents under
    :data:`hiclass_parallel.datasets.build_wordnet.ALL_PARENTS_RULE` (every hypernym pointer; the
    instance-hypernym pointers when there is none) instead of the first one: 2,239 synsets
    have several parents (2,208 nouns, 31 verbs), ``person.n.01`` for one is both an
    ``organism.n.01`` and a ``causal_agent.n.01``. The tree is this DAG with each synset's
    first parent in data-file order; ``Dag`` itself lists a node's parents by ascending id
    (for WordNet, data-file order of the *parents*), and
    ``load_wordnet_glosses(hypernyms="all").target`` gives them in the order of the synset's
    pointers. Needs no nltk and no network.

    This is a function of its own rather than an option of :func:`load_wordnet_tree`
    because it returns another type: a ``Tree`` has one parent per class, a ``Dag`` several.
    Unroll it (:meth:`~hiclass_parallel.dag.Dag.unroll`) for the tree methods:

    ==========  =======  ===============  ========  ======
    ``pos``     classes  several parents  unrolled  levels
    ==========  =======  ===============  ========  ======
    ``None``    117,659            2,239   147,194      20
    ``"n"``      82,115            2,208   111,551      20
    ``"v"``      13,767               31    13,866      13
    ==========  =======  ===============  ========  ======

    Parameters
    ----------
    pos : {"n", "v"} or None, default=None
        Part of speech: nouns, verbs, or None for every synset (adjectives and adverbs,
        which have no hypernyms, are top-level classes). Nouns' and verbs' hypernyms are of
        their own part of speech, so no link is dropped.

    Returns
    -------
    Dag
        Labels are synset names, node ids in the order of :func:`load_wordnet_tree`'s
        classes (for a ``pos``, those of that part of speech, in the same order). Built
        once per process and ``pos`` (about a second) and cached: every call returns the
        same object, whose ancestor matrix is then computed once too.

    Raises
    ------
    ValueError
        When ``pos`` is not one of the values above.

    Examples
    --------
    >>> from hiclass_parallel.datasets import load_wordnet_dag
    >>> dag = load_wordnet_dag("n")
    >>> dag.n_nodes, dag.n_unrolled()
    (82115, 111551)
    >>> dag.parents_of("person.n.01")
    ['organism.n.01', 'causal_agent.n.01']
    >>> dag.parents_of("dog.n.01")
    ['domestic_animal.n.01', 'canine.n.02']
    """
    _check_pos(pos)
    return _dag_of(pos)


# --------------------------------------------------------------------------- the data set
def _pos_of(names: tuple[str, ...]) -> np.ndarray:
    """nltk pos letter of every synset name (``"dog.n.01"`` -> ``"n"``)."""
    return np.asarray([name.rsplit(".", 2)[1] for name in names])


def _restrict(tree: Tree, keep: np.ndarray) -> Tree:
    """The tree of the classes ``keep`` (ids ascending, closed under parents), re-indexed."""
    new_id = np.full(tree.n_classes + 1, -1, dtype=np.int64)  # slot -1 maps a top-level parent
    new_id[keep] = np.arange(keep.size)
    parents = tree.parents[keep]
    outside = (parents >= 0) & (new_id[parents] < 0)
    # A class whose parent was dropped becomes top level (cannot happen for a pos or a root).
    new_parents = np.where(outside, -1, new_id[parents])
    return Tree.from_parents(new_parents, labels=tree.labels[keep].tolist())


def load_wordnet_glosses(
    root: str | None = None,
    pos: str | None = "n",
    *,
    include_lemmas: bool = False,
    include_examples: bool = False,
    return_X_y: bool = False,
    return_tree: bool = False,
    hypernyms: str = "first",
) -> Bunch | tuple[list[str], np.ndarray] | tuple[list[str], np.ndarray, Tree | Dag]:
    """Hypernym placement on WordNet 3.0: place a concept in the taxonomy from its definition.

    One sample per synset that has a parent in the chosen part of the tree: ``X`` is the
    synset's gloss (its definition; optionally with its lemma names and examples), ``y`` its
    parent (hypernym) under :data:`hiclass_parallel.datasets.build_wordnet.PARENT_RULE`, a label at any depth
    of the tree. Every target is an internal node (it has the sample's synset as a child) and
    is the answer, not a coarse label: train with ``semantics="terminal"`` (the default
    ``"partial"`` predicts leaves only, so it could never give these answers).
    Sizes (samples / classes of the tree / levels / distinct targets):

    ============================  =======  =======  ======  =======
    ``root``, ``pos``             samples  classes  levels  targets
    ============================  =======  =======  ======  =======
    ``None``, ``"n"``              82,114   82,115      20   16,899
    ``None``, ``"v"``              13,208   13,767      13    3,309
    ``None``, ``None``             95,322  117,659      20   20,208
    ``"animal.n.01"``               4,016    4,017      14    1,056
    ``"plant.n.02"``                4,483    4,484      10      757
    ``"person.n.01"``              10,291   10,292      10    1,717
    ``"artifact.n.01"``            10,503   10,504      12    2,500
    ``"dog.n.01"``                    188      189       6       43
    ============================  =======  =======  ======  =======

    (``docs/wordnet.md`` lists more roots; ``tests/datasets/test_wordnet.py`` checks these figures.)

    With ``hypernyms="all"`` the target of a sample is the tuple of *all* its parents
    (:data:`hiclass_parallel.datasets.build_wordnet.ALL_PARENTS_RULE`, in data-file order, the
    first being the ``"first"`` target), a multi-label target, and the hierarchy is a
    :class:`~hiclass_parallel.dag.Dag` (unrolled: classes of the unrolled tree, and its
    levels; 2+: samples with several labels; dropped: parents left out because they lie
    outside the subset):

    ============================  =======  =======  ========  ======  =====  ======  =======
    ``root``, ``pos``             samples  classes  unrolled  levels     2+  labels  dropped
    ============================  =======  =======  ========  ======  =====  ======  =======
    ``None``, ``"n"``              82,114   82,115   111,551      20  2,208  17,157        0
    ``None``, ``"v"``              13,208   13,767    13,866      13     31   3,315        0
    ``None``, ``None``             95,322  117,659   147,194      20  2,239  20,472        0
    ``"animal.n.01"``               4,016    4,017     4,375      14     35   1,059        2
    ``"person.n.01"``              10,296   10,297    12,333      10    698   1,769       63
    ``"artifact.n.01"``            10,698   10,699    12,226      12    231   2,580       63
    ============================  =======  =======  ========  ======  =====  ======  =======

    (``tests/datasets/test_wordnet_dag.py`` checks these figures.)

    Parameters
    ----------
    root : str, default=None
        Restrict to the subtree under this synset (e.g. ``"animal.n.01"``); the root is a
        class of the returned tree but not a sample (its parent lies outside). ``None`` keeps
        every synset of ``pos``. With ``hypernyms="all"``, a synset is under ``root`` when
        ``root`` is its ancestor through *any* parent (``person.n.01`` then holds 10,297
        synsets, not 10,292), and parents outside that subset are dropped from the targets
        and from the DAG (a sample keeps at least one: the one through which it is under
        ``root``).
    pos : {"n", "v"} or None, default="n"
        Part of speech: nouns, verbs, or None for every synset, whose tree is then the
        paper's full tree (:func:`load_wordnet_tree`); WordNet gives adjectives and adverbs
        no hypernyms, so they are classes but never samples. With a ``root``, it must match
        the root's part of speech or be None.
    include_lemmas : bool, default=False
        Prefix each gloss with the synset's lemma names (``"dog, domestic dog, Canis
        familiaris: a member of the genus Canis ..."``).
    include_examples : bool, default=False
        Append the gloss's example sentences, quoted, after a semicolon (as WordNet writes them).
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.
    return_tree : bool, default=False
        With ``return_X_y``, return ``(data, target, tree)``: the tree the classifier needs
        (as :func:`~hiclass_parallel.datasets.make_hierarchical_classification` does); with
        ``hypernyms="all"``, ``(data, target, dag)``.
    hypernyms : {"first", "all"}, default="first"
        ``"first"``: one parent per synset (:data:`hiclass_parallel.datasets.build_wordnet.PARENT_RULE`),
        a label per sample and a :class:`~hiclass_parallel.tree.Tree`. ``"all"``: every parent
        (:data:`hiclass_parallel.datasets.build_wordnet.ALL_PARENTS_RULE`), a tuple of labels per
        sample and a :class:`~hiclass_parallel.dag.Dag` (``.dag`` in the Bunch). The texts and
        samples do not depend on it, except that with a ``root`` the ``"all"`` subset may hold
        more synsets (the ``"first"`` samples are among them, in the same order).

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        With fields ``data`` (list of str, the texts X), ``target`` (object ndarray of
        synset names, the parents y), ``synsets`` (object ndarray, the synset each text
        defines), ``tree`` (:class:`Tree` of the chosen part of WordNet, whose labels include
        every target), and ``DESCR`` (a description with this subset's sizes).
    (data, target) : tuple of list of str and ndarray
        When ``return_X_y`` is True.
    (data, target, tree) : tuple of list of str, ndarray and Tree
        When ``return_X_y`` and ``return_tree`` are True.

    With ``hypernyms="all"``, ``target`` is an object ndarray of tuples of synset names (one
    or more per sample, data-file order; the "list of labels per sample" multi-label form),
    and the Bunch holds ``dag`` (the :class:`~hiclass_parallel.dag.Dag` of the chosen part of
    WordNet, whose labels include every target; its unrolled tree is ``dag.unroll().tree``)
    instead of ``tree``; ``DESCR`` also counts the labels dropped.

    Raises
    ------
    UnknownLabelError
        When ``root`` is not a synset name of WordNet 3.0.
    ValueError
        When ``pos`` or ``hypernyms`` is not one of the values above, ``pos`` does not match
        the root's, or the root is a leaf (it has no hyponyms to place).

    Examples
    --------
    >>> from hiclass_parallel.datasets import load_wordnet_glosses
    >>> animals = load_wordnet_glosses("animal.n.01")
    >>> len(animals.data), animals.tree.n_classes, animals.tree.n_levels
    (4016, 4017, 14)
    >>> i = animals.synsets.tolist().index("dog.n.01")
    >>> animals.data[i]
    'a member of the genus Canis (probably descended from the common wolf) that has been domesticated by man since prehistoric times; occurs in many breeds'
    >>> animals.target[i]
    'canine.n.02'
    >>> X, y = load_wordnet_glosses("dog.n.01", include_lemmas=True, return_X_y=True)
    >>> X[0], y[0]
    ('pooch, doggie, doggy, barker, bow-wow: informal terms for dogs', 'dog.n.01')
    >>> X, y, tree = load_wordnet_glosses("dog.n.01", return_X_y=True, return_tree=True)
    >>> tree
    Tree(n_classes=189, n_levels=6, n_leaves=146)

    Every hypernym, as multi-label targets over a DAG:

    >>> people = load_wordnet_glosses("person.n.01", hypernyms="all")
    >>> people.dag
    Dag(n_nodes=10297, n_edges=11035, n_unrolled=12333)
    >>> synsets = people.synsets.tolist()
    >>> people.target[synsets.index("wife.n.01")], people.target[synsets.index("mother.n.01")]
    (('woman.n.01', 'spouse.n.01'), ('parent.n.01',))
    >>> sum(len(labels) > 1 for labels in people.target)
    698
    """
    if return_tree and not return_X_y:
        raise ValueError("return_tree=True goes with return_X_y=True; the Bunch always holds the hierarchy")
    if hypernyms not in ("first", "all"):
        raise ValueError(f"hypernyms must be 'first' (one parent, a Tree) or 'all' (every parent, a Dag), got {hypernyms!r}")
    _check_pos(pos)
    if hypernyms == "all":
        return _glosses_with_every_hypernym(root, pos, include_lemmas, include_examples, return_X_y, return_tree)
    tree = load_wordnet_tree()
    kinds = _pos_of(_field("names"))
    if root is not None:
        root_id = _root_id(root, pos, tree)
        keep_mask = tree.paths[:, tree.depth[root_id]] == root_id
        if keep_mask.sum() == 1:
            raise ValueError(f"root {root!r} is a leaf of the WordNet tree: no hyponyms to place under it")
    elif pos is None:
        keep_mask = np.ones(tree.n_classes, dtype=bool)
    else:
        keep_mask = kinds == pos
    keep = np.flatnonzero(keep_mask)
    sub = tree if keep.size == tree.n_classes else _restrict(tree, keep)
    samples = keep[sub.parents >= 0]
    parents = tree.parents[samples]
    texts = _texts(samples, include_lemmas, include_examples)
    target = tree.labels[parents]
    if return_X_y:
        return (texts, target, sub) if return_tree else (texts, target)
    where = f"the subtree under {root!r}" if root is not None else f"all {_POS_NAMES[pos]}"
    descr = _describe(
        "Given the definition of a concept, predict its parent in the WordNet 3.0 taxonomy (its\n"
        "hypernym, at any depth). One sample per synset with a parent; the tree keeps one parent\n"
        "per synset (hiclass_parallel.datasets.build_wordnet.PARENT_RULE).\n\n"
        f"Subset: {where}.\n"
        f"Samples: {len(texts):,}; classes of the tree: {sub.n_classes:,}; levels: {sub.n_levels}; "
        f"distinct targets: {np.unique(parents).size:,}.\n",
        include_lemmas, include_examples,
    )
    return Bunch(
        data=texts,
        target=target,
        synsets=tree.labels[samples],
        tree=sub,
        DESCR=descr,
    )


def _root_id(root: str, pos: str | None, hierarchy: Tree | Dag) -> int:
    """The id of synset ``root`` (of the full tree or DAG), checked against ``pos``."""
    root_id = int(hierarchy.to_ids([root])[0])
    root_pos = root.rsplit(".", 2)[1]
    if pos is not None and root_pos != pos:
        raise ValueError(f"root {root!r} is of part of speech {root_pos!r}, not pos={pos!r}; pass pos={root_pos!r} or None")
    return root_id


def _texts(samples: np.ndarray, include_lemmas: bool, include_examples: bool) -> list[str]:
    """The gloss of every synset id of ``samples``, with the options of load_wordnet_glosses."""
    definitions, examples, lemmas = _field("definitions"), _field("examples"), _field("lemmas")
    texts = []
    for i in samples.tolist():
        text = definitions[i]
        if include_examples and examples[i]:
            text += "; " + "; ".join(f'"{e}"' for e in examples[i])
        if include_lemmas:
            text = ", ".join(lemma.replace("_", " ") for lemma in lemmas[i]) + ": " + text
        texts.append(text)
    return texts


def _describe(body: str, include_lemmas: bool, include_examples: bool) -> str:
    return (
        "WordNet 3.0 hypernym placement (glosses)\n"
        "=======================================\n\n"
        f"{body}"
        f"Texts: definition{' + examples' if include_examples else ''}"
        f"{', prefixed with lemma names' if include_lemmas else ''}.\n\n"
        "Source: Princeton University, WordNet 3.0 (2006), redistributed under its licence\n"
        f"({WORDNET_LICENSE_FILE.name}, shipped with this package).\n"
    )


def _glosses_with_every_hypernym(
    root: str | None, pos: str | None, include_lemmas: bool, include_examples: bool, return_X_y: bool, return_tree: bool
) -> Bunch | tuple[list[str], np.ndarray] | tuple[list[str], np.ndarray, Dag]:
    """``load_wordnet_glosses(..., hypernyms="all")``: tuples of parents as targets, a Dag."""
    full = load_wordnet_dag()
    names = _field("names")
    if root is not None:
        root_id = _root_id(root, pos, full)
        # The root's descendants through any parent: its column of the ancestor matrix.
        keep_mask = full.ancestor_matrix()[:, [root_id]].toarray().ravel()
        if keep_mask.sum() == 1:
            raise ValueError(f"root {root!r} is a leaf of the WordNet DAG: no hyponyms to place under it")
        dag = full.subgraph(keep_mask)
    else:
        dag = load_wordnet_dag(pos)
        keep_mask = np.ones(full.n_nodes, dtype=bool) if pos is None else _pos_of(names) == pos
    keep = np.flatnonzero(keep_mask)
    # -1 (the implicit root) sorts first among a node's parents: a top-level node has only it.
    samples = keep[dag.parent_ids[dag.parent_offsets[:-1]] >= 0]
    hypernyms = _hypernyms()
    target = np.empty(samples.size, dtype=object)
    n_labels = 0
    for k, i in enumerate(samples.tolist()):
        target[k] = tuple(names[p] for p in hypernyms[i] if keep_mask[p])
        n_labels += len(hypernyms[i])
    dropped = n_labels - sum(len(labels) for labels in target)
    texts = _texts(samples, include_lemmas, include_examples)
    if return_X_y:
        return (texts, target, dag) if return_tree else (texts, target)
    where = f"the synsets under {root!r} through any parent" if root is not None else f"all {_POS_NAMES[pos]}"
    n_several = sum(len(labels) > 1 for labels in target)
    distinct = len({label for labels in target for label in labels})
    descr = _describe(
        "Given the definition of a concept, predict its parents in the WordNet 3.0 taxonomy (its\n"
        "hypernyms, at any depth). One sample per synset with a parent; its target is the tuple of\n"
        "all its parents (hiclass_parallel.datasets.build_wordnet.ALL_PARENTS_RULE), a multi-label target,\n"
        "and the hierarchy is the DAG of every hypernym.\n\n"
        f"Subset: {where}.\n"
        f"Samples: {len(texts):,}; classes of the DAG: {dag.n_nodes:,} ({dag.n_unrolled():,} unrolled); "
        f"levels: {int(dag.depth.max()) + 1}; samples with several labels: {n_several:,}; "
        f"distinct labels: {distinct:,}; labels dropped (parents outside the subset): {dropped:,}.\n",
        include_lemmas, include_examples,
    )
    return Bunch(
        data=texts,
        target=target,
        synsets=full.labels[samples],
        dag=dag,
        DESCR=descr,
    )
