"""WordNet 3.0 with every hypernym: the shipped DAG, its builder, and multi-label glosses.

Everything but the builder test needs only the package; the builder test needs nltk and
WordNet 3.0 dictionary files (``apt-get install -y wordnet-base``) and skips, saying so, without.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import textwrap
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from hiclass_parallel import UnknownLabelError
from hiclass_parallel.dag import Dag
from hiclass_parallel.datasets import (
    load_wordnet,
    load_wordnet_dag,
    load_wordnet_glosses,
    load_wordnet_tree,
)
from hiclass_parallel.datasets.build_wordnet import (
    ALL_PARENTS_RULE,
    PARENT_RULE,
    WordNetNotFoundError,
    find_wordnet_data,
)

REPO = Path(__file__).resolve().parents[2]

# pos -> (classes, synsets with several parents, unrolled classes, levels), as in
# load_wordnet_dag's docstring; the unrolled sizes are those measured from the dictionary files
# by benchmarks/bench_dag_wordnet.py (docs/dag.md, rule "hypernyms").
DAG_SIZES = {
    None: (117_659, 2_239, 147_194, 20),
    "n": (82_115, 2_208, 111_551, 20),
    "v": (13_767, 31, 13_866, 13),
}

# (root, pos) -> (samples, classes of the DAG, unrolled classes, levels, samples with several
# labels, distinct labels, labels dropped), as in load_wordnet_glosses's docstring.
ALL_SIZES = {
    (None, "n"): (82_114, 82_115, 111_551, 20, 2_208, 17_157, 0),
    (None, "v"): (13_208, 13_767, 13_866, 13, 31, 3_315, 0),
    (None, None): (95_322, 117_659, 147_194, 20, 2_239, 20_472, 0),
    ("animal.n.01", "n"): (4_016, 4_017, 4_375, 14, 35, 1_059, 2),
    ("person.n.01", "n"): (10_296, 10_297, 12_333, 10, 698, 1_769, 63),
    ("artifact.n.01", "n"): (10_698, 10_699, 12_226, 12, 231, 2_580, 63),
}


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, int]:
    return {name: i for i, name in enumerate(load_wordnet._field("names"))}


def _file_order(name: str) -> tuple[str, ...]:
    """The parents of a synset in data-file order, straight from the shipped file."""
    names = load_wordnet._field("names")
    return tuple(names[p] for p in load_wordnet._hypernyms()[_index()[name]])


# --------------------------------------------------------------------------- the DAG
@pytest.mark.parametrize("pos", list(DAG_SIZES))
def test_dag_sizes(pos):
    dag = load_wordnet_dag(pos)
    classes, several, unrolled, levels = DAG_SIZES[pos]
    assert dag.n_nodes == classes
    assert int((np.diff(dag.parent_offsets) > 1).sum()) == several
    assert dag.n_unrolled() == unrolled
    assert int(dag.depth.max()) + 1 == levels  # the unrolled tree's depth: the longest path
    assert load_wordnet_dag(pos) is dag  # cached
    if pos is None:
        assert dag is load_wordnet_dag()


def test_first_parents_are_the_tree_and_the_rest_are_every_hypernym():
    tree, dag = load_wordnet_tree(), load_wordnet_dag()
    hypernyms = load_wordnet._hypernyms()
    assert dag.labels.tolist() == tree.labels.tolist()
    firsts = np.array([ids[0] if ids else -1 for ids in hypernyms])
    np.testing.assert_array_equal(firsts, tree.parents)
    # The Dag holds the same parents, by ascending id; top-level synsets only the implicit root.
    expected = np.concatenate([sorted(ids) if ids else [-1] for ids in hypernyms])
    np.testing.assert_array_equal(dag.parent_ids, expected)
    assert sum(len(ids) > 1 for ids in hypernyms) == 2_239
    assert load_wordnet._field("extra_parents").shape == (sum(len(ids) - 1 for ids in hypernyms if ids), 2)


def test_known_synsets_keep_their_parents_in_file_order():
    dag = load_wordnet_dag()
    assert _file_order("person.n.01") == ("organism.n.01", "causal_agent.n.01")
    # dog.n.01: "@ canine.n.02 @ domestic_animal.n.01" on its line; the Dag sorts by id.
    assert _file_order("dog.n.01") == ("canine.n.02", "domestic_animal.n.01")
    assert dag.parents_of("dog.n.01") == ["domestic_animal.n.01", "canine.n.02"]
    # Saint Ambrose: six instance hypernyms and no hypernym, the most paths of any synset.
    assert _file_order("ambrose.n.01") == (
        "bishop.n.01", "theologian.n.01", "composer.n.01", "church_father.n.01", "saint.n.01",
        "doctor_of_the_church.n.01",
    )
    assert max(dag.n_paths()) == 12 and dag.n_paths()[int(dag.to_ids(["ambrose.n.01"])[0])] == 12
    # Alabama's line reads "@i american_state @ south": the hypernym wins, the instance
    # hypernym is left out (ALL_PARENTS_RULE), and the tree's parent is the same.
    assert _file_order("alabama.n.01") == ("south.n.01",)
    assert load_wordnet_tree().path_labels("alabama.n.01")[-2:] == ["south.n.01", "alabama.n.01"]
    assert _file_order("einstein.n.01") == ("physicist.n.01",)
    assert _file_order("entity.n.01") == () and _file_order("good.a.01") == ()
    # No cycle among hypernym pointers (Dag refuses cycles): the restrain/inhibit loop of
    # tests/datasets/test_wordnet.py closes only through a hyponym pointer, which no rule reads.
    assert _file_order("restrain.v.01") == ("inhibit.v.04",) and _file_order("inhibit.v.04") == ("suppress.v.04",)


def test_dag_has_no_cycle_and_depth_grows_along_every_link():
    dag = load_wordnet_dag()
    child = np.repeat(np.arange(dag.n_nodes), np.diff(dag.parent_offsets))
    real = dag.parent_ids >= 0
    assert (dag.depth[child[real]] > dag.depth[dag.parent_ids[real]]).all()


def test_shipped_file_records_the_rule():
    meta = load_wordnet._field("meta")
    assert meta["format"] == 2 and meta["all_parents_rule"] == ALL_PARENTS_RULE
    assert meta["parent_rule"] == PARENT_RULE and meta["n_extra_parents"] == 2_339
    assert load_wordnet.WORDNET_FILE.stat().st_size < 3.7e6  # the extra parents cost about 7 kB


def test_dag_errors():
    with pytest.raises(ValueError, match="no hypernyms"):
        load_wordnet_dag("a")
    with pytest.raises(ValueError, match="pos must be 'n', 'v' or None, got 'noun'"):
        load_wordnet_dag("noun")


# --------------------------------------------------------------------------- multi-label glosses
def _descendants(root: str) -> set[str]:
    """Synsets under ``root`` through any parent: a breadth-first walk down, from the file."""
    names, hypernyms = load_wordnet._field("names"), load_wordnet._hypernyms()
    children: dict[int, list[int]] = {}
    for child, ids in enumerate(hypernyms):
        for p in ids:
            children.setdefault(p, []).append(child)
    seen, todo = {names.index(root)}, deque([names.index(root)])
    while todo:
        for c in children.get(todo.popleft(), []):
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return {names[i] for i in seen}


@pytest.mark.parametrize(("root", "pos"), list(ALL_SIZES))
def test_all_hypernyms_sizes_and_targets(root, pos):
    data = load_wordnet_glosses(root, pos, hypernyms="all")
    samples, classes, unrolled, levels, several, distinct, dropped = ALL_SIZES[(root, pos)]
    dag = data.dag
    assert isinstance(dag, Dag) and "tree" not in data
    assert len(data.data) == len(data.target) == len(data.synsets) == samples
    assert (dag.n_nodes, dag.n_unrolled(), int(dag.depth.max()) + 1) == (classes, unrolled, levels)
    assert data.target.dtype == object and all(isinstance(t, tuple) and t for t in data.target)
    assert sum(len(t) > 1 for t in data.target) == several
    assert len({label for t in data.target for label in t}) == distinct
    # Each target is the synset's parents in the subset, in file order; the others are dropped.
    kept = set(dag.labels.tolist())
    everything = [_file_order(synset) for synset in data.synsets]
    assert data.target.tolist() == [tuple(p for p in ps if p in kept) for ps in everything]
    assert sum(map(len, everything)) - sum(map(len, data.target)) == dropped
    # ... and they are the parents of the synset in the DAG returned (which sorts them by id).
    rows = dag.to_ids(data.synsets)
    child = np.repeat(rows, [len(t) for t in data.target])
    edges = np.unique(np.stack([child, dag.to_ids([p for t in data.target for p in t])], axis=1), axis=0)
    dag_child = np.repeat(np.arange(dag.n_nodes), np.diff(dag.parent_offsets))
    real = dag.parent_ids >= 0
    np.testing.assert_array_equal(edges, np.stack([dag_child[real], dag.parent_ids[real]], axis=1))
    assert f"labels dropped (parents outside the subset): {dropped:,}" in data.DESCR
    if root == "animal.n.01":  # the levels are those of the unrolled tree
        tree = dag.unroll().tree
        assert (tree.n_classes, tree.n_levels) == (unrolled, levels)
    if root is not None:
        assert set(dag.labels.tolist()) == _descendants(root)
        assert set(data.synsets.tolist()) == _descendants(root) - {root}


@pytest.mark.parametrize(("root", "pos"), [(None, "v"), ("animal.n.01", "n"), ("person.n.01", "n")])
def test_all_and_first_agree_on_texts_and_first_label(root, pos):
    kwargs = dict(include_lemmas=True, include_examples=True)
    first = load_wordnet_glosses(root, pos, **kwargs)
    every = load_wordnet_glosses(root, pos, hypernyms="all", **kwargs)
    # With a root, "all" may hold more synsets (under the root through a later parent only):
    # the tree's are among them, in the same order, with the same texts and first label.
    where = {s: i for i, s in enumerate(every.synsets.tolist())}
    rows = np.array([where[s] for s in first.synsets.tolist()])
    assert (np.diff(rows) > 0).all()
    assert [every.data[i] for i in rows] == first.data
    assert [every.target[i][0] for i in rows] == first.target.tolist()
    if root is None:
        assert every.synsets.tolist() == first.synsets.tolist()
        assert every.dag.labels.tolist() == first.tree.labels.tolist()
    else:
        assert set(first.tree.labels.tolist()) <= set(every.dag.labels.tolist())


def test_all_hypernyms_return_forms_and_errors():
    X, y, dag = load_wordnet_glosses("dog.n.01", hypernyms="all", return_X_y=True, return_tree=True)
    bunch = load_wordnet_glosses("dog.n.01", hypernyms="all")
    assert X == bunch.data and y.tolist() == bunch.target.tolist() and dag.n_nodes == bunch.dag.n_nodes
    X2, y2 = load_wordnet_glosses("dog.n.01", hypernyms="all", return_X_y=True)
    assert X2 == X and y2.tolist() == y.tolist()
    assert load_wordnet_glosses(pos=None, hypernyms="all").dag is load_wordnet_dag()
    with pytest.raises(ValueError, match="hypernyms must be 'first'.*or 'all'.*got 'every'"):
        load_wordnet_glosses(hypernyms="every")
    with pytest.raises(ValueError, match="rock_hind.n.01.*leaf of the WordNet DAG"):
        load_wordnet_glosses("rock_hind.n.01", hypernyms="all")
    with pytest.raises(UnknownLabelError, match="animal.n.99"):
        load_wordnet_glosses("animal.n.99", hypernyms="all")
    with pytest.raises(ValueError, match=r"part of speech 'n', not pos='v'"):
        load_wordnet_glosses("animal.n.01", pos="v", hypernyms="all")


@pytest.mark.slow
def test_same_dag_and_targets_in_every_process():
    code = """
        import hashlib
        from hiclass_parallel.datasets import load_wordnet_dag, load_wordnet_glosses
        dag = load_wordnet_dag()
        data = load_wordnet_glosses("person.n.01", hypernyms="all")
        h = hashlib.sha256(dag.parent_ids.tobytes() + repr(data.target.tolist()).encode())
        print(h.hexdigest())
    """
    outs = set()
    for seed in ("0", "4242"):
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        outs.add(proc.stdout.strip())
    data = load_wordnet_glosses("person.n.01", hypernyms="all")
    here = hashlib.sha256(load_wordnet_dag().parent_ids.tobytes() + repr(data.target.tolist()).encode())
    assert outs == {here.hexdigest()}


# --------------------------------------------------------------------------- the builder
def test_pointer_rule_on_data_file_lines():
    from hiclass_parallel.datasets.build_wordnet import _hypernym_pointers

    # offset lex_filenum ss_type w_cnt word lex_id ... p_cnt pointers | gloss
    line = ("00000001 03 n 02 a 0 b 0 005 ~ 00000009 n 0000 @ 00000005 n 0000 @i 00000007 n 0000 "
            "@ 00000003 n 0000 @ 00000005 n 0000 | a gloss with @ 00000002 n in it  \n")
    assert _hypernym_pointers(line) == [("n", 5), ("n", 3)]  # file order, repeats once, no @i
    instances = "00000001 03 n 01 a 0 003 @i 00000008 n 0000 ~ 00000009 n 0000 @i 00000004 n 0000 | g\n"
    assert _hypernym_pointers(instances) == [("n", 8), ("n", 4)]
    assert _hypernym_pointers("00000001 03 n 01 a 0 000 | top\n") == []


@pytest.mark.slow
def test_nltk_builder_reads_every_hypernym_as_shipped():
    pytest.importorskip("nltk", reason="the WordNet builder needs nltk (pip install 'hiclass_parallel[wordnet]')")
    try:
        source = find_wordnet_data()
    except WordNetNotFoundError as exc:
        pytest.skip("no WordNet 3.0 data files: `apt-get install -y wordnet-base` (or set WNSEARCHDIR) "
                    f"to check the shipped hypernyms against nltk's reading [{str(exc).splitlines()[0]}]")
    from hiclass_parallel.datasets.build_wordnet import read_wordnet

    data = read_wordnet(source)  # checks every parent against nltk's hypernyms()
    assert [tuple(ids) for ids in data.hypernyms] == list(load_wordnet._hypernyms())
    dag = data.to_dag()
    np.testing.assert_array_equal(dag.parent_ids, load_wordnet_dag().parent_ids)
    assert dag.parents_of("person.n.01") == ["organism.n.01", "causal_agent.n.01"]
