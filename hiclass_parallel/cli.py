"""Layer 9: the ``hiclass-parallel`` command (also ``python -m hiclass_parallel``).

Subcommands:

- ``demo``: train a :class:`~hiclass_parallel.HierarchicalClassifier` in a TF-IDF pipeline on
  the shipped WordNet gloss data set (hypernym placement) and report hierarchical metrics;
- ``tree``: describe a tree (the shipped WordNet tree by default, or a saved ``.npz``).

The benchmarks are not part of the installed package: from a source checkout run
``python -m benchmarks.bench_paper_table`` and ``python -m benchmarks.bench_engine``.

Errors (a missing file, an unknown ``--root``, ``--device cuda`` without a GPU, a bad option,
``--epochs 0``, an ``--out`` that is a file) print one line, ``hiclass-parallel: error: ...``, on
stderr and exit with status 2, sub-command usage errors included. ``--debug`` lets the
exception propagate instead, so the traceback shows and a debugger (``python -m pdb``) stops
at it; the exit status is then Python's for an uncaught exception, 1. ``--version`` prints
the version.

Ctrl-C prints ``hiclass-parallel: interrupted`` on stderr and exits with status 130 (128 +
SIGINT, as a shell reports an interrupted command). An interrupted ``demo`` reports nothing and
writes no file: training raises the interrupt instead of keeping the truncated model, and the
report files are written aside and moved into ``--out`` only at the end of a whole run, so the
files already there stay as they were.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["build_parser", "describe_tree", "main", "root_label"]

PROG = "hiclass-parallel"

#: Exit status of a command that failed on its input (argparse's status for usage errors).
EXIT_ERROR = 2

#: Exit status after Ctrl-C: 128 + SIGINT, what a shell reports for an interrupted command.
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors on one line (the usage itself is one ``--help`` away).

    Sub-command parsers are of this class too (argparse copies the parent's class); their
    ``prog`` is ``"hiclass-parallel demo"``, so the line starts with :data:`PROG` rather than
    ``prog`` to read like every other error, and names the sub-command's help.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"{PROG}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    """``--epochs``: 0 epochs would report an untrained model as if it were the demo's."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (nothing is trained with {value}), got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the command line (exposed for tests and docs).

    Examples
    --------
    >>> args = build_parser().parse_args(["demo", "--root", "dog.n.01", "--epochs", "5"])
    >>> args.command, args.root, args.epochs, args.partition
    ('demo', 'dog.n.01', 5, 'auto')
    """
    from ._version import __version__

    parser = _Parser(
        prog=PROG,
        description="Hierarchical classification in parallel: demo and tree inspection.",
        epilog="benchmarks, from a source checkout:\n  python -m benchmarks.bench_paper_table\n  python -m benchmarks.bench_engine\n  python -m benchmarks.bench_text",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    debug_help = "on an error, show the full traceback instead of one line"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    sub = parser.add_subparsers(dest="command", required=True)
    # --debug after the subcommand too; SUPPRESS keeps a subcommand from resetting it to False
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)

    demo = sub.add_parser("demo", parents=[common], help="train and evaluate a classifier on WordNet glosses (hypernym placement)")
    demo.add_argument("--root", default=None,
                      help="synset whose subtree is the task, e.g. animal.n.01 (default: all 82,115 nouns)")
    demo.add_argument("--full-tree", action="store_true",
                      help="the whole WordNet 3.0 tree (117,659 classes): nouns and verbs placed by their glosses, "
                           "adjectives and adverbs classes without rows; a GPU (--device cuda) trains it in seconds")
    demo.add_argument("--epochs", type=_positive_int, default=None,
                      help="training epochs, at least 1 (default: the classifier's)")
    demo.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)")
    demo.add_argument("--partition", choices=["auto", "level", "sibling"], default="auto",
                      help="softmax groups (default: %(default)s: sibling, trained path-locally, for text)")
    demo.add_argument("--test-size", type=float, default=0.2, help="held-out fraction of synsets (default: %(default)s)")
    demo.add_argument("--out", type=Path, default=Path("demo-output"),
                      help="folder for the plot and report (level_accuracy.png, report.txt, report.json), checked "
                           "before training; any path, e.g. /tmp/demo (default: %(default)s, git-ignored)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")

    tree = sub.add_parser("tree", parents=[common], help="describe a tree: classes, levels, leaves per level, buffer memory")
    tree.add_argument("path", nargs="?", default=None, help="a tree saved with Tree.save (default: shipped WordNet 3.0)")
    tree.add_argument("--root", default=None, help="describe the subtree under this label")
    return parser


def describe_tree(tree) -> str:
    """A short text description of a tree: sizes per level and memory of its buffers.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> print(describe_tree(Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])))  # doctest: +NORMALIZE_WHITESPACE
    Tree(n_classes=9, n_levels=3, n_leaves=6)
    level   classes    leaves
        0         2         0
        1         4         3
        2         3         3
    memory: mask 0.00 MB (bool (3, 9)), paths 0.00 MB (int32 (9, 3)), host arrays 0.00 MB in all
    device buffers of partition_scores and labels_to_paths (the README's "tree buffers"): 0.00 MB
    """
    import numpy as np

    lines = [repr(tree)]
    per_level = np.bincount(tree.depth, minlength=tree.n_levels)
    leaves = np.bincount(tree.depth[tree.is_leaf], minlength=tree.n_levels)
    lines.append(f"{'level':>5} {'classes':>9} {'leaves':>9}")
    for level in range(tree.n_levels):
        lines.append(f"{level:>5} {per_level[level]:>9,} {leaves[level]:>9,}")
    # MB are 10**6 bytes, as in the README. The host arrays (parents, depth, mask, paths) are
    # not what the paper's operations keep on a device: that is the int32 paths and one int64
    # flat level index per class (the README's and benchmarks' "tree buffers").
    device_bytes = tree.paths.nbytes + 8 * tree.n_classes
    lines.append(
        f"memory: mask {tree.mask.nbytes / 1e6:.2f} MB (bool {tree.mask.shape}), "
        f"paths {tree.paths.nbytes / 1e6:.2f} MB (int32 {tree.paths.shape}), host arrays {tree.nbytes / 1e6:.2f} MB in all"
    )
    lines.append(
        "device buffers of partition_scores and labels_to_paths (the README's \"tree buffers\"): "
        f"{device_bytes / 1e6:.2f} MB"
    )
    return "\n".join(lines)


def _label_hint(tree, wordnet: bool) -> str:
    """What the labels of ``tree`` look like, for an error about ``--root``."""
    if wordnet:
        return "labels are WordNet synset names such as dog.n.01"
    labels = tree.labels
    if labels.dtype.kind in "iu":
        return f"this tree's labels are integers, {labels.min()} to {labels.max()}"
    shown = ", ".join(repr(label) for label in labels[:3].tolist())
    return f"this tree's labels are like {shown}"


def root_label(tree, root: str, *, wordnet: bool = False):
    """The label of ``tree`` that the command-line text ``root`` names.

    A command line gives text, but labels may be integers (a tree saved from
    ``Tree.from_parents`` without labels, or with integer labels): the text is taken as it
    is first, then as an integer, so ``--root 0`` finds label 0 and a string label ``"0"``
    alike.

    Parameters
    ----------
    tree : Tree
        The tree whose class ``root`` should be.
    root : str
        The text given to ``--root``.
    wordnet : bool, default=False
        Whether ``tree`` is WordNet's, for the hint of the error.

    Returns
    -------
    str or int
        The label, of the tree's label type.

    Raises
    ------
    UnknownLabelError
        Neither reading is a class of the tree; the message names ``root`` and says what
        the tree's labels look like.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> root_label(Tree.from_parents([-1, 0, 0]), "0")
    0
    >>> root_label(Tree.from_edges([("dog", "animal")]), "dog")
    'dog'
    """
    from .exceptions import UnknownLabelError

    candidates: list = [root]
    try:
        candidates.append(int(root))
    except ValueError:
        pass
    first_error = None
    for candidate in candidates:
        try:
            tree.to_ids([candidate])
        except UnknownLabelError as err:
            first_error = first_error or err
            continue
        return candidate
    raise UnknownLabelError(f"{first_error} (check --root; {_label_hint(tree, wordnet)})") from first_error


def _cmd_tree(args: argparse.Namespace) -> int:
    from .tree import Tree

    wordnet = args.path is None
    if wordnet:
        from .datasets import load_wordnet_tree

        tree = load_wordnet_tree()
        print("WordNet 3.0 (shipped with the package)")
    else:
        tree = Tree.load(args.path)
    if args.root is not None:
        label = root_label(tree, args.root, wordnet=wordnet)
        tree = tree.subtree(label)
        print(f"subtree under {label!r}")
    print(describe_tree(tree))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo
    from .estimators._checks import check_device

    check_device(args.device)  # before loading data and building the features
    if args.full_tree and args.root is not None:
        raise ValueError(f"--full-tree and --root {args.root} name two tasks: give one")
    run_demo(root=args.root, full_tree=args.full_tree, epochs=args.epochs, device=args.device, partition=args.partition,
             test_size=args.test_size, out=args.out, seed=args.seed, verbose=not args.quiet)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hiclass-parallel``; returns the exit status.

    Examples
    --------
    >>> main(["tree", "--root", "dog.n.01"])  # doctest: +ELLIPSIS
    WordNet 3.0 (shipped with the package)
    subtree under 'dog.n.01'
    Tree(n_classes=189, n_levels=6, ...)
    ...
    0
    """
    args = build_parser().parse_args(argv)
    handler = {"demo": _cmd_demo, "tree": _cmd_tree}[args.command]
    try:
        return handler(args)
    except KeyboardInterrupt as interrupt:
        if args.debug:
            raise
        _release_half_built(interrupt)
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # noqa: BLE001 - every failure becomes one line, unless --debug
        if args.debug:
            raise
        print(f"{PROG}: error: {_one_line(err)} (--debug shows the traceback)", file=sys.stderr)
        return EXIT_ERROR


def _release_half_built(interrupt: KeyboardInterrupt) -> None:
    """Free what the interrupted call was building before the one line is printed.

    Ctrl-C can land inside a constructor (a training progress bar's, before it sets an
    attribute its finaliser reads). The half-built object lives only in the interrupt's
    traceback; freed after the line, its finaliser fails and Python prints that failure, an
    echo of the interrupt, as the last lines. The traceback is dropped and collected here,
    and finaliser errors of that kind (``AttributeError``: an attribute the constructor never
    set) are not printed; any other finaliser error is reported as usual."""
    import gc

    previous = sys.unraisablehook

    def hook(unraisable: "sys.UnraisableHookArgs") -> None:
        if not isinstance(unraisable.exc_value, AttributeError):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        interrupt.__traceback__ = None
        gc.collect()
    finally:
        sys.unraisablehook = previous


def _one_line(err: BaseException) -> str:
    """A failure in one line: what failed, and the offending input where the error names it."""
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.strerror or type(err).__name__}: {err.filename}"
    # The hint on what labels look like is added where the tree is known (root_label, the
    # demo), not here: a generic hint would claim WordNet names for any tree.
    return " ".join(str(err).split()) or type(err).__name__
