"""The main job: hypernym placement on the WordNet glosses shipped with the package.

From the definition of a synset (``"a breed of large dog ..."``), predict its ancestral path
in the WordNet tree (``animal > ... > dog > working dog``). The target of each synset is its
parent, an internal node, so the classifier uses *terminal* label semantics: a label is the
answer, and the model learns where paths stop. Synsets are split into training and held-out
sets; the held-out report is compared with a flat most-frequent baseline.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["build_demo_pipeline", "estimate_training_seconds", "prepare_out_dir", "run_demo", "wide_columns"]

#: The recorded main job, the base of the time estimate printed before training: all noun
#: synsets with a parent (82,115 classes), 80% of them trained on, the classifier's default of
#: 2 epochs for that many rows, 2 idle cores (CPU). RECORDED_SECONDS spans the fastest and the
#: slowest recorded training time (docs/performance.md, "The main job"), so the estimate shows
#: the spread of real runs, not a bound.
RECORDED_TRAIN_ROWS = 65_691
RECORDED_CLASSES = 82_115
RECORDED_EPOCHS = 2
RECORDED_SECONDS = (18.0, 19.5)

#: Sibling groups wider than this cost a row more than the recorded job's rows pay (its widest
#: group is well under it): WIDE_COLUMN_SECONDS per training row, epoch and column of such a
#: group on the row's path (the sampled candidates, for a group the classifier samples: see
#: ``softmax_sample``). Fitted to the recorded full tree's training time without sampling,
#: against this estimate without the term (docs/performance.md, "Wide sibling groups").
WIDE_GROUP = 1024
WIDE_COLUMN_SECONDS = 1.2e-8


def build_demo_pipeline(tree: Any, *, epochs: int | None = None, device: str = "cpu", partition: str = "auto",
                        seed: int = 0, verbose: bool = True) -> Any:
    """The demo's model: TF-IDF features into a :class:`HierarchicalClassifier`.

    Parameters
    ----------
    tree : Tree
        The class tree (e.g. the WordNet subtree of the task).
    epochs : int, default=None
        Training epochs; ``None``: the classifier's default.
    device : str, default="cpu"
        torch device.
    partition : {"auto", "level", "sibling"}, default="auto"
        Softmax groups of the classifier (``"auto"``: sibling, trained path-locally, for
        the sparse TF-IDF features).
    seed : int, default=0
        Random state of the classifier.
    verbose : bool, default=True
        Show skorch's progress bar and epoch log.

    Returns
    -------
    sklearn.pipeline.Pipeline

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> pipe = build_demo_pipeline(Tree.from_edges([("dog", "animal")]), epochs=1, verbose=False)
    >>> [name for name, _ in pipe.steps]
    ['tfidf', 'clf']
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import Pipeline

    from .estimators import HierarchicalClassifier

    # The classifier's defaults for sparse input (SparseMLP, sibling partition trained
    # path-locally, best-first decoding): only the label semantics is set, as for any user.
    extra = {} if epochs is None else {"max_epochs": epochs}
    clf = HierarchicalClassifier(
        tree, partition=partition, semantics="terminal", device=device, verbose=int(verbose), random_state=seed,
        **extra,
    )
    # The features of benchmarks/bench_text.py, where flat and label-tree linear models get the same.
    tfidf = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), dtype=np.float32)
    return Pipeline([("tfidf", tfidf), ("clf", clf)])


def _readable(path: np.ndarray, pad: Any) -> str:
    return " > ".join(str(label) for label in path if label != pad)


def prepare_out_dir(out: str | Path) -> Path:
    """Create the output folder ``out`` if needed and check that files can be written in it.

    Called before any data is loaded or anything trained, so a folder that cannot take the
    plot and report costs nothing instead of a whole training run.

    Parameters
    ----------
    out : str or Path
        The folder (created with its parents if missing).

    Returns
    -------
    Path

    Raises
    ------
    NotADirectoryError
        ``out``, or one of its parents, is a file.
    OSError
        The folder cannot be created or written to (e.g. :class:`PermissionError`); the error
        names the folder.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     prepare_out_dir(pathlib.Path(tmp) / "a" / "b").is_dir()
    True
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"the output folder {str(out)!r} is a file: give a folder (or a path to create) "
                                 "for the plot and report")
    out.mkdir(parents=True, exist_ok=True)  # a parent that is a file: NotADirectoryError naming the path
    try:  # the permission bits do not tell everything (read-only mounts, ACLs): try it
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        raise PermissionError(err.errno, f"cannot write to the output folder ({err.strerror})", str(out)) from err
    return out


def _planned_epochs(n_rows: int, epochs: int | None) -> int:
    """The epochs the demo's classifier will run: ``epochs``, or the classifier's default for
    text (``SparseMLP``'s capabilities at the default ``batch_size="auto"``, see
    ``HierarchicalClassifier``'s ``max_epochs``). Printed before training; ``test_cli`` checks
    it against the epochs the fitted classifier ran."""
    if epochs is not None:
        return epochs
    from .estimators import SparseMLP
    from .estimators.fitting import resolve_batch_size
    from .estimators.networks import module_capabilities

    text = module_capabilities(SparseMLP)
    return text.default_max_epochs(n_rows, resolve_batch_size("auto", text, n_rows)[0])


def wide_columns(tree: Any, labels: Any, stop: bool = True, softmax_sample: int | None = None) -> float:
    """The mean, over training rows, of the columns of sibling groups wider than
    :data:`WIDE_GROUP` on each row's path: what a row pays beyond the recorded job. A group
    wider than ``softmax_sample`` (``None``: the classifier's default) counts the candidates it
    is sampled to.

    Parameters
    ----------
    tree : Tree
        The class tree.
    labels : array-like
        The training rows' labels (the tree's labels).
    stop : bool, default=True
        Whether the groups have stop columns (terminal semantics).
    softmax_sample : int, default=None
        The sampled softmax's limit.

    Returns
    -------
    float

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> wide_columns(Tree.from_edges([("dog", "animal")]), ["dog", "animal"])
    0.0
    """
    from .estimators._defaults import SOFTMAX_SAMPLE
    from .ops.sibling_paths import sibling_plan

    plan = sibling_plan(tree, stop)
    widths = np.diff(plan.group_ptr)
    limit = SOFTMAX_SAMPLE if softmax_sample is None else softmax_sample
    cost = np.where(widths > WIDE_GROUP, np.minimum(widths, limit), 0).astype(np.float64)
    ids = tree.to_ids(np.asarray(labels, dtype=object))
    paths = plan.paths[ids]
    on_path = np.where(paths >= 0, cost[plan.group_of[np.maximum(paths, 0)]], 0.0)
    return float(on_path.sum(axis=1).mean()) if len(ids) else 0.0


def estimate_training_seconds(n_rows: int, epochs: int, n_classes: int = RECORDED_CLASSES,
                              wide: float = 0.0) -> tuple[float, float]:
    """A rough range of the demo's training time on 2 idle CPU cores.

    The recorded main job (:data:`RECORDED_SECONDS` for :data:`RECORDED_TRAIN_ROWS` rows,
    :data:`RECORDED_EPOCHS` epochs and :data:`RECORDED_CLASSES` classes) scaled by rows x
    epochs x classes ** (1/4). A row costs less in a smaller tree (a smaller vocabulary, fewer
    output rows to update): the fourth root fits the cost per row and epoch of the recorded
    text benchmark (``docs/performance.md``) across subtrees of very different sizes.
    Rough all the same: a small subtree is dominated by fixed costs, and other processes on
    the same cores make it several times slower. Groups wider than the recorded job's add
    :data:`WIDE_COLUMN_SECONDS` per row, epoch and column of ``wide`` (:func:`wide_columns`).

    Parameters
    ----------
    n_rows : int
        Training rows.
    epochs : int
        Epochs.
    n_classes : int, default=RECORDED_CLASSES
        Classes of the tree.
    wide : float, default=0.0
        Columns of wide groups per row (:func:`wide_columns`).

    Returns
    -------
    (low, high) : tuple of float
        Seconds.

    Examples
    --------
    >>> estimate_training_seconds(65_691, 2, 82_115)
    (18.0, 19.5)
    >>> [round(t, 1) for t in estimate_training_seconds(3_212, 10, 4_017)]  # animal.n.01's defaults
    [2.1, 2.2]
    """
    scale = (n_rows * epochs) / (RECORDED_TRAIN_ROWS * RECORDED_EPOCHS) * (n_classes / RECORDED_CLASSES) ** 0.25
    low, high = RECORDED_SECONDS
    extra = WIDE_COLUMN_SECONDS * n_rows * epochs * wide
    return low * scale + extra, high * scale + extra


def _span(low: float, high: float) -> str:
    """A time range in the unit a reader expects (seconds up to 90 s, then minutes)."""
    if high < 10:
        return "under 10 s"
    if high < 90:
        return f"about {high:.0f} s" if round(low) == round(high) else f"about {low:.0f}-{high:.0f} s"
    return f"about {low / 60:.1f}-{high / 60:.1f} min"


def _plan(n_rows: int, n_classes: int, epochs: int | None, device: str, wide: float = 0.0) -> str:
    """What is about to be trained, and for how long, printed before training starts."""
    from .estimators.answer import MIN_AUTO_ROWS, held_out_size, rejoins

    planned = _planned_epochs(n_rows, epochs)
    which = "" if epochs is not None else " (the classifier's default for this many rows)"
    line = f"training on {n_rows:,} rows, {n_classes:,} classes, {planned} epoch{'s' * (planned != 1)}{which}, device {device}"
    held = held_out_size("auto", n_rows)
    if held >= MIN_AUTO_ROWS:
        when = "train only in the last epoch" if rejoins(planned, sparse_module=True) else "are held out of training"
        line += f"; {held:,} of the rows {when}, to calibrate predict_confidence"
    if not str(device).startswith("cpu"):
        return line + f"; no time estimate for device {device!r} (the recorded times are on a CPU)"
    low, high = estimate_training_seconds(n_rows, planned, n_classes, wide)
    return (
        f"{line}\nrough estimate: {_span(low, high)} of training on 2 idle cores (all nouns took "
        f"{RECORDED_SECONDS[0]:g}-{RECORDED_SECONDS[1]:g} s, scaled here by rows x epochs x classes ** (1/4)"
        + (f", plus {wide:,.0f} columns of wide sibling groups per row" if wide else "") + "); "
        "several times longer, or more, when other processes share the cores"
    )


def _mean_confidence(pipe: Any, clf: Any, X: Any) -> float | None:
    """Mean calibrated probability that the answers are right (``None`` when the fit did not
    calibrate: too few rows)."""
    if clf.answer_.calibrator is None:
        return None
    return float(clf.predict_confidence(pipe[:-1].transform(X)).mean())


def _json_number(value: Any) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None  # JSON has no NaN


def run_demo(root: str | None = None, epochs: int | None = None, device: str = "cpu", partition: str = "auto",
             test_size: float = 0.2, out: str | Path | None = "demo-output", seed: int = 0,
             verbose: bool = True, n_examples: int = 8, full_tree: bool = False) -> dict:
    """Train on WordNet glosses under ``root``, print the report, and return the figures.

    Before anything is loaded, ``out`` is created and checked (a folder that cannot take the
    report fails at once, not after training); before training, what is about to be trained
    (rows, classes, epochs) is printed with a rough estimate of the time it takes. The files
    are written aside and moved into ``out`` together at the end: Ctrl-C before then
    (``KeyboardInterrupt``, raised out of training as out of anything else) leaves ``out`` as
    it was, with the previous run's files if any.

    Parameters
    ----------
    root : str or None, default=None
        Synset whose subtree is the task (``None``: all 82,115 nouns, or the full tree with
        ``full_tree``; the time it takes is estimated and printed before training).
    epochs : int, default=None
        Training epochs, at least 1; ``None``: the classifier's default.
    device : str, default="cpu"
        torch device.
    partition : {"auto", "level", "sibling"}, default="auto"
        Softmax groups of the classifier.
    test_size : float, default=0.2
        Held-out fraction of synsets.
    out : str or Path or None, default="demo-output"
        Folder for the per-level accuracy plot (``level_accuracy.png``, with matplotlib), the
        report as text (``report.txt``) and its figures as JSON (``report.json``); ``None``:
        nothing written.
    seed : int, default=0
        Seed of the split and the classifier.
    verbose : bool, default=True
        Progress bar and epoch log.
    n_examples : int, default=8
        Held-out predictions to print as readable paths.
    full_tree : bool, default=False
        The whole WordNet 3.0 tree (117,659 classes in 20 levels) as the target space: nouns
        and verbs are placed by their glosses (95,322 synsets), adjectives and adverbs are
        classes without rows (WordNet gives them no hypernyms). Not with ``root``.

    Returns
    -------
    dict
        ``hierarchical_f1``, ``baseline_hierarchical_f1``, ``exact_path_accuracy``,
        ``mean_confidence`` (mean ``predict_confidence`` on the held-out synsets; ``None`` when
        the fit was too small to calibrate), ``fit_seconds``, ``epochs`` (run), ``n_train``, ``n_test``, ``plot``,
        ``report_text`` and ``report_json`` (paths or None), ``report``.

    Raises
    ------
    ValueError
        ``epochs`` below 1, or ``full_tree`` with a ``root``.
    UnknownLabelError
        ``root`` is not a WordNet synset.
    OSError
        ``out`` is a file or cannot be created or written to (see :func:`prepare_out_dir`).
    KeyboardInterrupt
        Ctrl-C: nothing is reported or written.

    Examples
    --------
    A small subtree and one epoch (the command ``hiclass-parallel demo`` runs the full one):

    >>> result = run_demo("dog.n.01", epochs=1, out=None, verbose=False, n_examples=0)  # doctest: +ELLIPSIS
    WordNet glosses under dog.n.01: 188 synsets, tree of 189 classes in 6 levels; 150 train, 38 held out
    training on 150 rows, 189 classes, 1 epoch, device cpu
    ...
    >>> result["n_test"], 0.0 <= result["hierarchical_f1"] <= 1.0
    (38, True)
    """
    from sklearn.dummy import DummyClassifier
    from sklearn.model_selection import train_test_split

    from .datasets import load_wordnet_glosses
    from .exceptions import UnknownLabelError
    from .metrics import (
        exact_path_accuracy_score,
        hierarchical_classification_report,
        hierarchical_f1_score,
        hierarchical_precision_score,
        hierarchical_recall_score,
        level_accuracy_score,
        mean_tree_distance,
    )

    # Zero epochs "trains" nothing and reports a random network as the demo's model.
    if epochs is not None and epochs < 1:
        raise ValueError(f"epochs={epochs!r}: the demo trains at least 1 epoch (None: the classifier's default)")
    if full_tree and root is not None:
        raise ValueError(f"full_tree=True and root={root!r} name two tasks: give one")
    out_dir = None if out is None else prepare_out_dir(out)
    said: list[str] = []  # everything printed but the progress bar: the text report

    def say(text: str = "") -> None:
        print(text, flush=True)  # flush: under a pipe the plan must show before training starts
        said.append(text)

    try:
        # A root fixes its part of speech; without one, all nouns, or every synset (the full tree).
        pos = None if root is not None or full_tree else "n"
        data = load_wordnet_glosses(root, pos=pos, include_lemmas=True)
    except UnknownLabelError as err:
        raise UnknownLabelError(f"{err} (root: labels are WordNet synset names such as dog.n.01)") from err
    tree = data.tree
    X_train, X_test, y_train, y_test, _, syn_test = train_test_split(
        data.data, data.target, data.synsets, test_size=test_size, random_state=seed
    )
    task = root or ("the full tree (nouns and verbs)" if full_tree else "all nouns")
    say(f"WordNet glosses under {task}: {len(data.data):,} synsets, tree of "
        f"{tree.n_classes:,} classes in {tree.n_levels} levels; {len(X_train):,} train, {len(X_test):,} held out")
    say(_plan(len(X_train), tree.n_classes, epochs, device, wide_columns(tree, y_train)))

    pipe = build_demo_pipeline(tree, epochs=epochs, device=device, partition=partition, seed=seed, verbose=verbose)
    start = time.perf_counter()
    pipe.fit(X_train, y_train)
    fit_seconds = time.perf_counter() - start
    clf = pipe.named_steps["clf"]
    epochs_run = len(clf.net_.history)
    pred = pipe.predict(X_test)
    say(f"\ntrained {epochs_run} epoch{'s' * (epochs_run != 1)} in {fit_seconds:.1f} s")

    baseline = DummyClassifier(strategy="most_frequent").fit(X_train, y_train).predict(X_test)
    h_f1 = hierarchical_f1_score(y_test, pred, tree=tree)
    base_f1 = hierarchical_f1_score(y_test, baseline, tree=tree)
    exact = exact_path_accuracy_score(y_test, pred, tree=tree)
    # Deep levels of the subtree may hold no held-out label: report 0 there, without a warning.
    report = hierarchical_classification_report(y_test, pred, tree, zero_division=0.0)
    say("\nHeld-out report\n" + report)
    say(f"hierarchical F1 {h_f1:.3f} vs flat most-frequent baseline {base_f1:.3f} "
        f"(always {str(baseline[0])!r}); exact path accuracy {exact:.3f}")
    confidence = _mean_confidence(pipe, clf, X_test)
    if confidence is not None:
        say(f"predict_confidence: {confidence:.3f} on average, for an exact accuracy of {exact:.3f} "
            f"(calibrated on {clf.answer_.calibrator.n_rows:,} training rows held out: docs/calibration.md)")

    if n_examples:
        say("\nExamples (gloss -> predicted path | true parent):")
    for i in range(min(n_examples, len(X_test))):
        gloss = X_test[i] if len(X_test[i]) < 90 else X_test[i][:87] + "..."
        say(f"  {syn_test[i]}: {gloss}\n    -> {_readable(pred[i], clf.pad_label_)}  |  {y_test[i]}")

    plot_path = text_path = json_path = None
    if out_dir is not None:
        level_acc, level_support = level_accuracy_score(y_test, pred, tree, zero_division=np.nan)
        figures = {
            "root": root, "full_tree": full_tree, "epochs": epochs_run, "partition": clf.partition_, "device": device, "seed": seed,
            "test_size": test_size, "n_synsets": len(data.data), "n_classes": tree.n_classes,
            "n_levels": tree.n_levels, "n_train": len(X_train), "n_test": len(X_test),
            "fit_seconds": round(fit_seconds, 2),
            "hierarchical_f1": h_f1,
            "hierarchical_precision": hierarchical_precision_score(y_test, pred, tree=tree, zero_division=0.0),
            "hierarchical_recall": hierarchical_recall_score(y_test, pred, tree=tree, zero_division=0.0),
            "exact_path_accuracy": exact,
            "mean_confidence": confidence,
            "mean_tree_distance": mean_tree_distance(y_test, pred, tree=tree),
            "baseline": {"strategy": "most_frequent", "label": str(baseline[0]), "hierarchical_f1": base_f1},
            # null where no held-out path reaches the level (its accuracy is undefined)
            "level_accuracy": [_json_number(v) for v in level_acc],
            "level_support": [_json_number(v) for v in level_support],
        }
        figures = {k: float(v) if isinstance(v, np.floating) else v for k, v in figures.items()}
        # Written aside and moved into out_dir together: Ctrl-C before that leaves the last run's files.
        with _staged(out_dir) as stage:
            plot_path = _plot(y_test, pred, tree, stage)
            (stage / "report.json").write_text(json.dumps(figures, indent=2) + "\n")
            (stage / "report.txt").write_text("\n".join(said) + "\n")
        plot_path = None if plot_path is None else out_dir / plot_path.name
        text_path, json_path = out_dir / "report.txt", out_dir / "report.json"
        written = ", ".join(str(p) for p in (plot_path, text_path, json_path) if p is not None)
        print(f"\nwritten: {written}")
    return {
        "hierarchical_f1": h_f1,
        "baseline_hierarchical_f1": base_f1,
        "exact_path_accuracy": exact,
        "mean_confidence": confidence,
        "fit_seconds": fit_seconds,
        "epochs": epochs_run,
        "n_train": len(X_train),
        "n_test": len(X_test),
        "plot": plot_path,
        "report_text": text_path,
        "report_json": json_path,
        "report": report,
    }


@contextlib.contextmanager
def _staged(out: Path) -> Any:
    """A hidden folder in ``out`` to write the run's files into; on leaving without an error
    they replace those of ``out``, all of them, with Ctrl-C held back while they move.

    An interrupted or failed run (Ctrl-C while predicting or plotting) leaves the files of the
    previous run as they were, and never half of each: the staging folder is removed.
    """
    stage = Path(tempfile.mkdtemp(prefix=".demo-", dir=out))
    try:
        yield stage
        with _interrupt_held():
            for path in sorted(stage.iterdir()):
                os.replace(path, out / path.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def _interrupt_held() -> Any:
    """Ctrl-C (SIGINT) inside is raised as ``KeyboardInterrupt`` on leaving, not in the middle:
    the files being moved into place are then all of one run. Only in the main thread with
    Python's own handler (elsewhere nothing is changed)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _plot(y_true: Any, y_pred: Any, tree: Any, out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(matplotlib is not installed: pip install 'hiclass_parallel[plot]' for the plot)")
        return None
    from .metrics.plot import plot_level_accuracy

    ax = plot_level_accuracy(y_true, y_pred, tree=tree)
    path = out / "level_accuracy.png"
    ax.figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    return path
