"""The main job: hypernym placement on the WordNet glosses shipped with the package.

From the definition of a synset (``"a breed of large dog ..."``), predict its ancestral path
in the WordNet tree (``animal > ... > dog > working dog``). The target of each synset is its
parent, an internal node, so the classifier uses *terminal* label semantics: a label is the
answer, and the model learns where paths stop. Synsets are split into training and held-out
sets; the held-out report is compared with a flat most-frequent baseline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["run_demo", "build_demo_pipeline"]


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


def run_demo(root: str | None = None, epochs: int | None = None, device: str = "cpu", partition: str = "auto",
             test_size: float = 0.2, out: str | Path | None = "demo-output", seed: int = 0,
             verbose: bool = True, n_examples: int = 8) -> dict:
    """Train on WordNet glosses under ``root``, print the report, and return the figures.

    Parameters
    ----------
    root : str or None, default=None
        Synset whose subtree is the task (``None``: all 82,115 nouns; about 1.5 minutes of
        training on 2 cores).
    epochs : int, default=None
        Training epochs; ``None``: the classifier's default.
    device : str, default="cpu"
        torch device.
    partition : {"auto", "level", "sibling"}, default="auto"
        Softmax groups of the classifier.
    test_size : float, default=0.2
        Held-out fraction of synsets.
    out : str or Path or None, default="demo-output"
        Folder for the per-level accuracy plot (``None``: no plot).
    seed : int, default=0
        Seed of the split and the classifier.
    verbose : bool, default=True
        Progress bar and epoch log.
    n_examples : int, default=8
        Held-out predictions to print as readable paths.

    Returns
    -------
    dict
        ``hierarchical_f1``, ``baseline_hierarchical_f1``, ``exact_path_accuracy``,
        ``fit_seconds``, ``n_train``, ``n_test``, ``plot`` (path or None), ``report``.

    Examples
    --------
    A small subtree and one epoch (the command ``hiclass-parallel demo`` runs the full one):

    >>> result = run_demo("dog.n.01", epochs=1, out=None, verbose=False, n_examples=0)  # doctest: +ELLIPSIS
    WordNet glosses under dog.n.01: 188 synsets, tree of 189 classes in 6 levels; 150 train, 38 held out
    ...
    >>> result["n_test"], 0.0 <= result["hierarchical_f1"] <= 1.0
    (38, True)
    """
    from sklearn.dummy import DummyClassifier
    from sklearn.model_selection import train_test_split

    from .datasets import load_wordnet_glosses
    from .metrics import exact_path_accuracy_score, hierarchical_classification_report, hierarchical_f1_score

    data = load_wordnet_glosses(root, pos=None if root is not None else "n", include_lemmas=True)
    tree = data.tree
    X_train, X_test, y_train, y_test, _, syn_test = train_test_split(
        data.data, data.target, data.synsets, test_size=test_size, random_state=seed
    )
    print(f"WordNet glosses under {root or 'all nouns'}: {len(data.data):,} synsets, tree of "
          f"{tree.n_classes:,} classes in {tree.n_levels} levels; {len(X_train):,} train, {len(X_test):,} held out")

    pipe = build_demo_pipeline(tree, epochs=epochs, device=device, partition=partition, seed=seed, verbose=verbose)
    start = time.perf_counter()
    pipe.fit(X_train, y_train)
    fit_seconds = time.perf_counter() - start
    clf = pipe.named_steps["clf"]
    pred = pipe.predict(X_test)
    print(f"\ntrained in {fit_seconds:.1f} s")

    baseline = DummyClassifier(strategy="most_frequent").fit(X_train, y_train).predict(X_test)
    h_f1 = hierarchical_f1_score(y_test, pred, tree=tree)
    base_f1 = hierarchical_f1_score(y_test, baseline, tree=tree)
    exact = exact_path_accuracy_score(y_test, pred, tree=tree)
    # Deep levels of the subtree may hold no held-out label: report 0 there, without a warning.
    report = hierarchical_classification_report(y_test, pred, tree, zero_division=0.0)
    print("\nHeld-out report\n" + report)
    print(f"hierarchical F1 {h_f1:.3f} vs flat most-frequent baseline {base_f1:.3f} "
          f"(always {str(baseline[0])!r}); exact path accuracy {exact:.3f}")

    print("\nExamples (gloss -> predicted path | true parent):")
    for i in range(min(n_examples, len(X_test))):
        gloss = X_test[i] if len(X_test[i]) < 90 else X_test[i][:87] + "..."
        print(f"  {syn_test[i]}: {gloss}\n    -> {_readable(pred[i], clf.pad_label_)}  |  {y_test[i]}")

    plot_path = None
    if out is not None:
        plot_path = _plot(y_test, pred, tree, Path(out))
        if plot_path is not None:
            print(f"\nper-level accuracy plot: {plot_path}")
    return {
        "hierarchical_f1": h_f1,
        "baseline_hierarchical_f1": base_f1,
        "exact_path_accuracy": exact,
        "fit_seconds": fit_seconds,
        "n_train": len(X_train),
        "n_test": len(X_test),
        "plot": plot_path,
        "report": report,
    }


def _plot(y_true: Any, y_pred: Any, tree: Any, out: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(matplotlib is not installed: pip install 'hiclass_parallel[plot]' for the plot)")
        return None
    from .metrics.plot import plot_level_accuracy

    out.mkdir(parents=True, exist_ok=True)
    ax = plot_level_accuracy(y_true, y_pred, tree=tree)
    path = out / "level_accuracy.png"
    ax.figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(ax.figure)
    return path
