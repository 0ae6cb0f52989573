"""WordNet 3.0: the shipped tree, the nltk builder, and the gloss data set.

The shipped-file tests need nothing beyond the package. The builder tests need nltk and
WordNet 3.0 dictionary files (``apt-get install -y wordnet-base`` on Debian/Ubuntu, or any
folder named by ``WNSEARCHDIR``); without them they skip and say so.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from hiclass_parallel import Tree, UnknownLabelError
from hiclass_parallel.datasets import (
    load_wordnet,
    load_wordnet_glosses,
    load_wordnet_tree,
)
from hiclass_parallel.datasets.build_wordnet import (
    PARENT_RULE,
    WordNetNotFoundError,
    find_wordnet_data,
)

# The ancestral paths documented in docs/wordnet.md. dog.n.01 takes the paper's path (a);
# rock_hind.n.01 is the one synset at the 20th level.
DOG_PATH = [
    "entity.n.01", "physical_entity.n.01", "object.n.01", "whole.n.02", "living_thing.n.01",
    "organism.n.01", "animal.n.01", "chordate.n.01", "vertebrate.n.01", "mammal.n.01",
    "placental.n.01", "carnivore.n.01", "canine.n.02", "dog.n.01",
]
ROCK_HIND_PATH = [
    "entity.n.01", "physical_entity.n.01", "object.n.01", "whole.n.02", "living_thing.n.01",
    "organism.n.01", "animal.n.01", "chordate.n.01", "vertebrate.n.01", "aquatic_vertebrate.n.01",
    "fish.n.01", "bony_fish.n.01", "teleost_fish.n.01", "spiny-finned_fish.n.01", "percoid_fish.n.01",
    "serranid_fish.n.01", "sea_bass.n.02", "grouper.n.02", "hind.n.01", "rock_hind.n.01",
]

# (root, pos) -> (samples, classes of the tree, levels, distinct targets), as in docs/wordnet.md.
GLOSS_SIZES = {
    (None, "n"): (82_114, 82_115, 20, 16_899),
    (None, "v"): (13_208, 13_767, 13, 3_309),
    (None, None): (95_322, 117_659, 20, 20_208),
    ("physical_entity.n.01", "n"): (45_919, 45_920, 19, 9_195),
    ("abstraction.n.06", "n"): (36_184, 36_185, 15, 7_702),
    ("organism.n.01", "n"): (19_437, 19_438, 15, 3_665),
    ("animal.n.01", "n"): (4_016, 4_017, 14, 1_056),
    ("plant.n.02", "n"): (4_483, 4_484, 10, 757),
    ("person.n.01", "n"): (10_291, 10_292, 10, 1_717),
    ("artifact.n.01", "n"): (10_503, 10_504, 12, 2_500),
    ("mammal.n.01", "n"): (1_175, 1_176, 10, 292),
    ("dog.n.01", "n"): (188, 189, 6, 43),
    ("change.v.01", "v"): (1_699, 1_700, 8, 372),
}

REPO = Path(__file__).resolve().parents[2]


def _path_of(tree: Tree, label: str) -> list[str]:
    row = tree.paths[tree.to_ids([label])[0]]
    return tree.to_labels(row[row >= 0]).tolist()


def _run(code: str, seed: str, timeout: float = 600) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# --------------------------------------------------------------------------- the shipped tree
def test_shipped_tree_has_the_papers_size():
    tree = load_wordnet_tree()
    assert (tree.n_classes, tree.n_levels) == (117_659, 20)
    assert int((tree.parents < 0).sum()) == 22_337  # synsets without hypernyms
    pos = np.array([name.rsplit(".", 2)[1] for name in tree.labels.tolist()])
    counts = {p: int((pos == p).sum()) for p in "nvasr"}
    assert counts["n"] == 82_115 and counts["v"] == 13_767 and counts["r"] == 3_621
    assert counts["a"] + counts["s"] == 18_156
    assert all(re.fullmatch(r".+\.[nvasr]\.\d\d+", name) for name in tree.labels.tolist())
    assert tree.labels[tree.depth == 19].tolist() == ["rock_hind.n.01"]


def test_documented_paths():
    tree = load_wordnet_tree()
    assert _path_of(tree, "dog.n.01") == DOG_PATH
    assert _path_of(tree, "rock_hind.n.01") == ROCK_HIND_PATH


def test_parent_rule_on_known_synsets():
    tree = load_wordnet_tree()

    def parent(label):
        p = tree.parents[tree.to_ids([label])[0]]
        return None if p < 0 else tree.labels[p]

    assert parent("dog.n.01") == "canine.n.02"  # first of @canine, @domestic_animal
    assert parent("einstein.n.01") == "physicist.n.01"  # instance hypernym only
    assert parent("paris.n.01") == "national_capital.n.01"
    assert parent("entity.n.01") is None and parent("good.a.01") is None and parent("breathe.v.01") is None
    # WordNet 3.0 has the verb cycle restrain.v.01 <-> inhibit.v.04 among all hypernym links;
    # the first-pointer rule breaks it.
    assert parent("restrain.v.01") == "inhibit.v.04" and parent("inhibit.v.04") == "suppress.v.04"


def test_shipped_file_is_small_documented_and_cached():
    assert load_wordnet.WORDNET_FILE.stat().st_size < 6e6
    meta = load_wordnet._field("meta")
    assert meta["wordnet_version"] == "3.0" and meta["n_classes"] == 117_659
    assert meta["parent_rule"] == PARENT_RULE
    notice = load_wordnet.WORDNET_LICENSE_FILE.read_text()
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in notice
    assert "Permission to use, copy, modify and distribute" in notice
    assert load_wordnet_tree() is load_wordnet_tree()
    fields = [load_wordnet._field(name) for name in ("names", "definitions", "examples", "lemmas")]
    assert {len(f) for f in fields} == {117_659}


@pytest.mark.slow
def test_same_tree_in_every_process():
    code = """
        import hashlib, sys
        from hiclass_parallel.datasets import load_wordnet_tree
        tree = load_wordnet_tree()
        digest = hashlib.sha256(tree.parents.tobytes() + "\\n".join(tree.labels.tolist()).encode()).hexdigest()
        print(tree.n_classes, tree.n_levels, digest, "nltk" in sys.modules)
    """
    tree = load_wordnet_tree()
    here = hashlib.sha256(tree.parents.tobytes() + "\n".join(tree.labels.tolist()).encode()).hexdigest()
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda seed: _run(code, seed).split(), ["0", "4242"]))
    for out in outs:
        assert out == ["117659", "20", here, "False"]  # and nltk was never imported


# --------------------------------------------------------------------------- finding the data
def _fake_dict(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True)
    for kind in ("data", "index"):
        for pos in ("noun", "verb", "adj", "adv"):
            (folder / f"{kind}.{pos}").write_text(f"  1 WordNet {version} Copyright 2006 by Princeton University.\n")
    return folder


def test_find_wordnet_data_errors_say_what_to_install(tmp_path):
    with pytest.raises(WordNetNotFoundError, match=r"apt-get install -y wordnet-base") as info:
        find_wordnet_data(tmp_path)
    assert "python -m nltk.downloader wordnet" in str(info.value)
    assert "load_wordnet_tree" in str(info.value)
    newer = _fake_dict(tmp_path / "wn31", "3.1")
    with pytest.raises(WordNetNotFoundError, match=r"WordNet 3.1, not 3.0"):
        find_wordnet_data(newer)
    assert find_wordnet_data(newer, version="3.1") == newer
    # An nltk data root is searched for corpora/wordnet.
    nltk_root = tmp_path / "nltk_data"
    _fake_dict(nltk_root / "corpora" / "wordnet", "3.0")
    assert find_wordnet_data(nltk_root) == nltk_root / "corpora" / "wordnet"


# --------------------------------------------------------------------------- the nltk builder
def _wordnet_source() -> Path:
    pytest.importorskip("nltk", reason="the WordNet builder needs nltk (pip install 'hiclass_parallel[wordnet]')")
    try:
        return find_wordnet_data()
    except WordNetNotFoundError as exc:
        pytest.skip("no WordNet 3.0 data files: `apt-get install -y wordnet-base` (or set WNSEARCHDIR) "
                    f"to compare the shipped file with the nltk builder [{str(exc).splitlines()[0]}]")


def _build_in_subprocesses(source: Path, folder: Path) -> list[Path]:
    """The builder's output, written by two processes with different PYTHONHASHSEED."""
    code = """
        import sys
        from hiclass_parallel.datasets.build_wordnet import _write_wordnet_file
        from hiclass_parallel.datasets.build_wordnet import read_wordnet
        _write_wordnet_file(read_wordnet(sys.argv[1]), sys.argv[2])
    """
    jobs = {seed: folder / f"seed{seed}.npz" for seed in ("0", "987654321")}

    def build(seed):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(source), str(jobs[seed])],
                              env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
        assert proc.returncode == 0, proc.stderr

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(build, jobs))
    return list(jobs.values())


@pytest.mark.slow
def test_nltk_builder_equals_the_shipped_file_whatever_the_hash_seed(tmp_path):
    # One test (not a fixture shared by several) so that pytest-xdist builds only once.
    source = _wordnet_source()
    files = _build_in_subprocesses(source, tmp_path)
    trees = [Tree.from_parents(load_wordnet._read_member(f, "parents"), load_wordnet._read_member(f, "names")) for f in files]
    for tree in trees:
        assert (tree.n_classes, tree.n_levels) == (117_659, 20)
        assert _path_of(tree, "dog.n.01") == DOG_PATH
        assert _path_of(tree, "rock_hind.n.01") == ROCK_HIND_PATH
    assert trees[0] == trees[1] == load_wordnet_tree()
    # Field by field, the shipped file is what nltk reads from the data found here; byte for
    # byte when the same nltk version built both.
    shipped_meta = load_wordnet._read_member(load_wordnet.WORDNET_FILE, "meta")
    for file in files:
        if load_wordnet._read_member(file, "meta")["built_with"] == shipped_meta["built_with"]:
            assert file.read_bytes() == load_wordnet.WORDNET_FILE.read_bytes()
    for field in ("names", "parents", "definitions", "examples", "lemmas", "meta"):
        shipped = load_wordnet._read_member(load_wordnet.WORDNET_FILE, field)
        for file in files:
            built = load_wordnet._read_member(file, field)
            if field == "parents":
                np.testing.assert_array_equal(built, shipped)
            elif field == "meta":
                built.pop("built_with"), shipped.pop("built_with", None)  # the nltk version may differ
                assert built == shipped
            else:
                differ = [i for i, (a, b) in enumerate(zip(built, shipped)) if a != b]
                assert len(built) == len(shipped) and not differ, (
                    f"{len(differ)} {field} differ from the shipped file (data from {source}), e.g. "
                    f"{[(shipped[i], built[i]) for i in differ[:3]]}"
                )


@pytest.mark.slow
def test_builder_copes_with_crlf_missing_lexnames_and_shared_files(tmp_path):
    """nltk's quirks: byte offsets (CRLF breaks them), a lexnames file, private files only."""
    from hiclass_parallel.datasets.build_wordnet import _nltk_reader

    source = _wordnet_source()
    if source.suffix == ".zip":
        pytest.skip("the WordNet data found is a zip; this test copies a folder")
    quirky = tmp_path / "dict"
    quirky.mkdir()
    for name in ("data.noun", "data.verb", "data.adj", "data.adv", "index.noun", "index.verb", "index.adj", "index.adv"):
        (quirky / name).write_bytes((source / name).read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
        os.chmod(quirky / name, 0o666)
    assert find_wordnet_data(quirky) == quirky
    with _nltk_reader(quirky) as (reader, _):
        synset = reader.synset("rock_hind.n.01")
        assert synset.definition().startswith("found around rocky coasts")
        assert synset.lexname() == "noun.animal"
    assert not list(Path(tmp_path).glob("corpora"))  # the private copy lives elsewhere
    shutil.rmtree(quirky)


# --------------------------------------------------------------------------- the gloss data set
@pytest.mark.parametrize(("root", "pos"), list(GLOSS_SIZES))
def test_gloss_sizes_per_root(root, pos):
    data = load_wordnet_glosses(root, pos)
    samples, classes, levels, targets = GLOSS_SIZES[(root, pos)]
    assert len(data.data) == len(data.target) == len(data.synsets) == samples
    assert (data.tree.n_classes, data.tree.n_levels) == (classes, levels)
    assert np.unique(data.target).size == targets
    assert f"Samples: {samples:,}" in data.DESCR


def test_gloss_targets_are_the_parents_in_the_subtree():
    full = load_wordnet_tree()
    data = load_wordnet_glosses("animal.n.01")
    assert data.tree == full.subtree("animal.n.01")
    sample_ids = full.to_ids(data.synsets)
    np.testing.assert_array_equal(full.to_ids(data.target), full.parents[sample_ids])
    # Targets sit at many depths of the subtree, and all are its classes.
    depths = data.tree.depth[data.tree.to_ids(data.target)]
    assert depths.min() == 0 and depths.max() == data.tree.n_levels - 2
    i = data.synsets.tolist().index("dog.n.01")
    assert data.target[i] == "canine.n.02"
    assert data.data[i].startswith("a member of the genus Canis")
    assert load_wordnet_glosses(pos=None).tree is full


def test_gloss_text_options():
    names, lemmas = load_wordnet._field("names"), load_wordnet._field("lemmas")
    definitions, examples = load_wordnet._field("definitions"), load_wordnet._field("examples")
    index = {name: i for i, name in enumerate(names)}
    X, y = load_wordnet_glosses("change.v.01", pos="v", include_lemmas=True, include_examples=True, return_X_y=True)
    plain = load_wordnet_glosses("change.v.01", pos="v")
    assert isinstance(X, list) and isinstance(y, np.ndarray) and len(X) == len(y) == 1_699
    np.testing.assert_array_equal(y, plain.target)
    with_examples = 0
    for text, bare, name in zip(X, plain.data, plain.synsets):
        i = index[name]
        assert bare == definitions[i]
        expected = ", ".join(lemma.replace("_", " ") for lemma in lemmas[i]) + ": " + definitions[i]
        if examples[i]:
            expected += "; " + "; ".join(f'"{e}"' for e in examples[i])
            with_examples += 1
        assert text == expected
    assert with_examples == 1_226  # most verb glosses have examples


def test_gloss_errors_name_the_problem():
    with pytest.raises(ValueError, match="no hypernyms"):
        load_wordnet_glosses(pos="a")
    with pytest.raises(ValueError, match="pos must be 'n', 'v' or None"):
        load_wordnet_glosses(pos="noun")
    with pytest.raises(ValueError, match=r"part of speech 'n', not pos='v'"):
        load_wordnet_glosses("animal.n.01", pos="v")
    with pytest.raises(UnknownLabelError, match="animal.n.99"):
        load_wordnet_glosses("animal.n.99")
    with pytest.raises(ValueError, match="rock_hind.n.01.*leaf"):
        load_wordnet_glosses("rock_hind.n.01")


# --------------------------------------------------------------------------- the paper's table
@pytest.mark.slow
def test_paper_table_benchmark_runs(tmp_path):
    """The benchmark runs as a module and reports the paper's objects (small batch; no timing asserted)."""
    pytest.importorskip("torch")
    out = tmp_path / "table.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_paper_table", "--quick", "--batch", "4",
         "--backends", "torch-cpu,numpy-cpu,torch-cuda", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| Scores y_blc (transformed) | 4 x 20 x 117659 | float32 |" in proc.stdout
    import json

    results = json.loads(out.read_text())["results"]
    assert [r["backend"] for r in results][:2] == ["torch-cpu", "numpy-cpu"]
    for r in results:
        assert r["objects"]["paths"]["shape"] == [4, 20] and r["objects"]["paths"]["dtype"] == "int64"
        assert r["buffers_bytes"] <= 12e6  # the target for the library's fixed memory


def test_the_loader_never_imports_the_builder():
    """Loading the shipped file needs neither nltk nor the builder: the builder imports the
    loader (for the file's place and format), never the other way round."""
    import ast
    import importlib.util

    tree = ast.parse(Path(load_wordnet.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported |= {node.module or ""} | {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
    assert not {name for name in imported if "build_wordnet" in name or name.startswith("nltk")}
    assert importlib.util.find_spec("hiclass_parallel.wordnet") is None  # the unreleased former path is gone


# ---------------------------------------------------------------------------- bad and extreme input
# Regression probes: each once gave a wrong result, a bare crash or a misleading error; each
# asserts the correct result or the named error now.
def test_wordnet_glosses_give_the_tree_with_return_x_y():
    from hiclass_parallel.datasets import load_wordnet_glosses

    X, y, tree = load_wordnet_glosses("dog.n.01", return_X_y=True, return_tree=True)
    assert len(X) == 188 and tree.n_classes == 189 and set(tree.to_ids(y).tolist()) <= set(range(189))
    with pytest.raises(ValueError, match="return_tree=True goes with return_X_y=True"):
        load_wordnet_glosses("dog.n.01", return_tree=True)
