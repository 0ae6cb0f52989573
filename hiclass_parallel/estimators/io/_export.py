"""Export for serving: the fitted network and the exact decoder as one torch module.

:meth:`HierarchicalClassifier.predict` decodes through :mod:`hiclass_parallel.ops` (NumPy on
the CPU, data-dependent best-first search for ``SparseMLP``), which ``torch.export`` cannot
trace. :class:`TreeDecoder` is the same exact decoding written for export: the tree lives in
buffers, every operation is a torch op with shapes fixed by the tree (a loop over the ``L``
levels, unrolled at trace time; no NumPy, no Python branch on data), and the batch size is
the only dynamic dimension. :func:`serving_module` puts the classifier's module in front of
it; :func:`export_program` and :func:`export_onnx` export that with a dynamic batch.

Decoding: for every node, the joint log-probability of its ancestral path (group
log-softmax by scatter reductions over the partition's groups, stop columns included in
their group's normaliser, accumulated level by level from the parents), then the best
candidate: the leaves under ``semantics="partial"``, every node plus its stop term under
``"terminal"``. Ties go to the lowest node id, as in :func:`~hiclass_parallel.ops.best_paths`.
``decoding="threshold"`` is not exported.

Input: a dense float batch ``(batch, n_features)``. A model trained on sparse text features
(:class:`SparseMLP`, the default for scipy sparse ``X``) takes the same features dense: its
input layer is then an ordinary matrix product with the same weights.

Rows that cannot be decided: ``predict`` refuses a NaN or an infinity in ``X``, but a serving
runtime answers every row and cannot raise for one, so a row of ``X`` holding one, or a row
whose scores hold a NaN or ``+inf`` (undecidable, as in :func:`~hiclass_parallel.ops.best_paths`),
gets the empty path (all -1) with log-probability NaN; eager torch, ``torch.export`` and
ONNX give the same answer. A row whose candidates all have log-probability ``-inf`` gets the
lowest-id candidate, as :func:`~hiclass_parallel.ops.best_paths` gives it.

A :class:`~hiclass_parallel.estimators.MultiLabelHierarchicalClassifier` is refused: its ids
are copies in the DAG's unrolled tree and its answers are label sets, not one path.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from ...ops.engine._engine import check_partition, check_semantics
from ...ops.groups import n_outputs, stop_columns
from ...tree import Tree
from ..answer import CLIP as _CLIP, TERMS
from ..classifier import HierarchicalClassifier
from ..multilabel import MultiLabelHierarchicalClassifier

__all__ = ["TreeDecoder", "AnswerReranker", "ServingModule", "serving_module", "export_program", "export_onnx"]


class TreeDecoder(nn.Module):
    """Exact best-path decoding of tree scores, in pure torch ops (exportable).

    Parameters
    ----------
    tree : Tree
        The class tree; node ids may be in any order.
    partition : {"level", "sibling"}, default="level"
    stop : bool, default=False
        Whether the scores carry stop columns (see :func:`~hiclass_parallel.ops.groups.n_outputs`).
    semantics : {"partial", "terminal"}, default="partial"
        Candidates: leaves, or every node with its stop term (needs ``stop=True``).

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel import Tree
    >>> from hiclass_parallel.estimators import TreeDecoder
    >>> tree = Tree.from_parents([-1, -1, 0, 0, 1, 1, 3, 3, 3])
    >>> paths, log_prob = TreeDecoder(tree, "sibling")(torch.tensor([[2.0, 0, 0, 3, 0, 0, 0, 1, 0]]))
    >>> paths
    tensor([[0, 3, 7]])
    """

    def __init__(self, tree: Tree, partition: str = "level", stop: bool = False, semantics: str = "partial"):
        super().__init__()

        check_partition(partition)
        check_semantics(semantics, stop)
        C, L = tree.n_classes, tree.n_levels
        groups = tree.groups(partition).astype(np.int64)
        G = tree.n_groups(partition)
        seg = np.concatenate([groups, np.arange(1, G, dtype=np.int64)]) if stop else groups
        assert seg.size == n_outputs(tree, partition, stop)
        depth = tree.depth.astype(np.int64)
        order = np.argsort(depth, kind="stable")
        position = np.empty(C, dtype=np.int64)
        position[order] = np.arange(C)
        parents = tree.parents.astype(np.int64)

        self.n_classes, self.n_groups, self.n_levels, self.n_scores = C, G, L, int(seg.size)
        self.partition, self.stop, self.semantics = partition, bool(stop), semantics
        self.register_buffer("segments", torch.from_numpy(seg))
        self.register_buffer("position", torch.from_numpy(position))
        self.register_buffer("paths", torch.from_numpy(tree.paths.astype(np.int64)))
        candidate = np.ones(C, dtype=bool) if semantics == "terminal" else tree.is_leaf.astype(bool)
        self.register_buffer("candidate", torch.from_numpy(candidate))
        # the answer of a row in which every candidate has probability 0, as best_paths gives it
        self.register_buffer("first_candidate", torch.tensor(int(np.flatnonzero(candidate)[0]), dtype=torch.int64))
        for d in range(L):
            nodes = order[depth[order] == d]
            self.register_buffer(f"level{d}_nodes", torch.from_numpy(nodes))
            if d:
                self.register_buffer(f"level{d}_parents", torch.from_numpy(position[parents[nodes]]))
        if semantics == "terminal":
            cols = stop_columns(tree, partition)
            self.register_buffer("stop_cols", torch.from_numpy(np.maximum(cols, 0).astype(np.int64)))
            self.register_buffer("has_stop", torch.from_numpy(cols >= 0))

    def node_log_probs(self, scores: torch.Tensor) -> torch.Tensor:
        """Joint log-probability of the path ending at every node, ``(batch, n_classes)``."""
        scores = scores.to(torch.float32)
        idx = self.segments.unsqueeze(0).expand(scores.shape[0], self.n_scores)
        start = torch.full((scores.shape[0], self.n_groups), float("-inf"), dtype=scores.dtype, device=scores.device)
        top = start.scatter_reduce(1, idx, scores, reduce="amax", include_self=True)
        # IEEE semantics of the ops: shift by a finite maximum only, and a group of -inf only
        # reads its log-normaliser as 0 (its members get -inf, not -inf - -inf = NaN)
        shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        total = torch.zeros_like(top).scatter_add(1, idx, torch.exp(scores - torch.gather(shift, 1, idx)))
        lse = torch.log(total) + shift
        lse = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)
        log_p = scores - torch.gather(lse, 1, idx)
        classes = log_p[:, : self.n_classes]
        acc = torch.index_select(classes, 1, self.level0_nodes)
        for d in range(1, self.n_levels):  # the L levels, unrolled at export
            nodes, parents = getattr(self, f"level{d}_nodes"), getattr(self, f"level{d}_parents")
            acc = torch.cat([acc, torch.index_select(classes, 1, nodes) + torch.index_select(acc, 1, parents)], 1)
        node = torch.index_select(acc, 1, self.position)  # back to node id order
        if self.semantics == "terminal":
            stop_term = torch.index_select(log_p, 1, self.stop_cols)
            node = node + torch.where(self.has_stop, stop_term, torch.zeros_like(stop_term))
        return node

    def forward(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Best paths ``(batch, n_levels)`` of node ids padded with -1, and their log-probabilities.

        A row whose scores hold a NaN or ``+inf`` has no probabilities: it gets the empty path
        (all -1) and log-probability NaN, as :func:`~hiclass_parallel.ops.best_paths` gives it.
        """
        value = self.candidate_log_probs(scores)
        best = torch.argmax(value, dim=1)  # first maximum: the lowest node id wins ties
        log_prob = torch.gather(value, 1, best.unsqueeze(1)).squeeze(1)
        return self.answer(scores, best, log_prob)

    def candidate_log_probs(self, scores: torch.Tensor) -> torch.Tensor:
        """The joint log-probability of every candidate answer, ``-inf`` for the others (and
        for a NaN), ``(batch, n_classes)``."""
        node = self.node_log_probs(scores)
        value = torch.where(self.candidate, node, torch.full_like(node, float("-inf")))
        # runtimes disagree on where a NaN ranks in argmax (torch: first; onnxruntime: never):
        # only undecidable rows hold one, and they are blanked below, so rank it last everywhere
        return torch.where(torch.isnan(value), torch.full_like(value, float("-inf")), value)

    def answer(self, scores: torch.Tensor, best: torch.Tensor, log_prob: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The paths of the chosen nodes ``best`` (log-probabilities ``log_prob``), blanked
        where the scores are undecidable."""
        # every candidate at -inf ties with the non-candidates: the lowest candidate id, never a
        # non-candidate (an internal node under partial semantics)
        best = torch.where(log_prob == float("-inf"), self.first_candidate, best)
        undecidable = (torch.isnan(scores) | (scores == float("inf"))).any(1)
        return _blank(torch.index_select(self.paths, 0, best), log_prob, undecidable)


class AnswerReranker(nn.Module):
    """The re-ranking of the answer by the answer model's terms, in torch ops (exportable).

    Of the ``k`` most probable candidates, the one with the highest
    ``log p + sum_i weight_i * term_i(x, candidate)``, over the terms kept (a weight above 0),
    in the order the answer model adds them (:data:`~hiclass_parallel.estimators.answer.TERMS`).
    Each term scores itself through its own export module
    (:meth:`~hiclass_parallel.estimators.answer.Term.export_module`): the re-ranker holds them in
    an ``nn.ModuleDict`` (``terms``) and each weight as a buffer (``weight_<name>``), and knows
    nothing of their kinds.

    Parameters
    ----------
    terms : mapping of str to Term or None
        The fitted terms by name (``"prototypes"``, ``"flat_term"``, ``"path_term"``); ``None``:
        no such term.
    weights : mapping of str to float or None
        Each term's weight (``clf``'s, as ``predict`` uses it); a term whose weight is missing,
        ``None`` or 0 is not scored.
    k : int
        How many of the model's most probable answers are re-ranked.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import HierarchicalClassifier, serving_module
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=300, n_features=8, branching=2, depth=2, random_state=0)
    >>> clf = HierarchicalClassifier(tree, max_epochs=2, prototypes=1.0, random_state=0).fit(X, y)
    >>> reranker = serving_module(clf).reranker   # dense rows: Gaussian prototypes
    >>> list(reranker.terms), type(reranker.terms["prototypes"]).__name__, reranker.k
    (['prototypes'], 'GaussianScores', 4)
    >>> float(reranker.weight_prototypes)
    1.0
    """

    def __init__(self, terms: Mapping[str, Any], weights: Mapping[str, float | None], k: int):
        super().__init__()
        unknown = (set(terms) | set(weights)) - set(TERMS)
        if unknown:
            raise ValueError(f"unknown re-ranking terms {sorted(unknown)}; known: {list(TERMS)}")
        kept = [name for name in TERMS if terms.get(name) is not None and weights.get(name)]
        self.k = int(k)
        self.terms = nn.ModuleDict({name: terms[name].export_module() for name in kept})
        for name in kept:
            self.register_buffer(f"weight_{name}", torch.tensor(float(weights[name]), dtype=torch.float32))

    def forward(self, X: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The chosen node and its log-probability per row, from the candidates' log-probabilities
        ``value`` (:meth:`TreeDecoder.candidate_log_probs`)."""
        top, nodes = torch.topk(value, self.k, dim=1)  # most probable first
        score = top
        for name, term in self.terms.items():  # the kept terms, unrolled at export
            score = score + getattr(self, f"weight_{name}") * term(X, nodes)
        score = torch.where(torch.isfinite(top), score, torch.full_like(top, float("-inf")))
        pick = torch.argmax(score, dim=1, keepdim=True)  # the first maximum: the model's order among ties
        return torch.gather(nodes, 1, pick).squeeze(1), torch.gather(top, 1, pick).squeeze(1)


def _blank(paths: torch.Tensor, log_prob: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The empty path (all -1) and log-probability NaN where ``rows`` (bool ``(batch,)``) holds:
    what a serving runtime, which cannot raise for one row, answers for a row it cannot decide."""
    paths = torch.where(rows.unsqueeze(1), torch.full_like(paths, -1), paths)
    return paths, torch.where(rows, torch.full_like(log_prob, float("nan")), log_prob)


class ServingModule(nn.Module):
    """A fitted network followed by :class:`TreeDecoder`: features in, best paths out.

    Parameters
    ----------
    module : torch.nn.Module
        Maps a float batch ``(batch, n_features)`` to scores ``(batch, n_scores)``.
    decoder : TreeDecoder
    calibration : tuple of 3 floats or None, default=None
        ``(a, b, c)`` of the classifier's :class:`~hiclass_parallel.estimators.BetaCalibrator`:
        ``forward`` then also returns the calibrated confidence of each answer
        (``predict_confidence``); ``(1, 1, 0)`` is the identity (the model's own probability).
    reranker : AnswerReranker or None, default=None
        The answer model's re-ranking of the answer by its terms, where the classifier has one.
    """

    def __init__(self, module: nn.Module, decoder: TreeDecoder,
                 calibration: tuple[float, float, float] | None = None, reranker: AnswerReranker | None = None):
        super().__init__()
        self.module = module
        self.decoder = decoder
        self.reranker = reranker
        self.confidence = calibration is not None
        self.register_buffer("calibration", torch.tensor(calibration if self.confidence else (1.0, 1.0, 0.0),
                                                         dtype=torch.float32))

    def forward(self, X: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(paths, log_prob)``: node-id paths ``(batch, n_levels)`` and their log-probabilities;
        with ``calibration``, ``(paths, log_prob, confidence)``.

        A row of ``X`` holding a NaN or an infinity (which ``predict`` refuses), or whose scores
        hold a NaN or ``+inf``, gets the empty path (all -1), log-probability NaN and
        confidence NaN.
        """
        X = X.to(torch.float32)
        scores = self.module(X)
        if self.reranker is None:
            paths, log_prob = self.decoder(scores)
        else:
            best, log_prob = self.reranker(X, self.decoder.candidate_log_probs(scores))
            paths, log_prob = self.decoder.answer(scores, best, log_prob)
        # checked on X too: a module may map a non-finite feature to finite scores (a ReLU of
        # -inf is 0), which would decode to a confident path the classifier would refuse
        paths, log_prob = _blank(paths, log_prob, ~torch.isfinite(X).all(1))
        if not self.confidence:
            return paths, log_prob
        # BetaCalibrator's map on the answer's probability, clipped as it clips (NaN stays NaN)
        p = torch.exp(log_prob).clamp(_CLIP, 1.0 - _CLIP)
        a, b, c = self.calibration[0], self.calibration[1], self.calibration[2]
        return paths, log_prob, torch.sigmoid(a * torch.log(p) - b * torch.log1p(-p) + c)


def _answer_parts(clf: Any, decoder: TreeDecoder, confidence: bool
                  ) -> tuple[AnswerReranker | None, tuple[float, float, float] | None]:
    """The serving module's parts of the classifier's answer model, the one place export reads
    it: the re-ranking, with the terms and weights ``predict`` uses (its decoder's; ``None``
    where nothing re-ranks), and the calibrator's map (the identity without one; ``None``
    without ``confidence``)."""
    reranking = clf._decoder()  # the re-ranking terms and weights predict uses
    reranker = None
    if reranking.reranking is not None:
        n_candidates = int(decoder.candidate.sum())
        reranker = AnswerReranker({"prototypes": reranking.prototypes,
                                   **{name: term for name, (term, _) in reranking.terms.items()}},
                                  {"prototypes": reranking.weight,
                                   **{name: weight for name, (_, weight) in reranking.terms.items()}},
                                  min(reranking.prototype_candidates, n_candidates))
    if not confidence:
        return reranker, None
    cal = clf.answer_.calibrator
    return reranker, (1.0, 1.0, 0.0) if cal is None else (cal.a, cal.b, cal.c)


def serving_module(clf: Any, semantics: str | None = None, confidence: bool = False) -> ServingModule:
    """The fitted classifier's network and exact decoder as one torch module (eval mode, CPU copy).

    Parameters
    ----------
    clf : HierarchicalClassifier
        A fitted classifier with ``decoding="best"``.
    semantics : {"partial", "terminal"}, default=None
        ``None``: the classifier's ``semantics``.
    confidence : bool, default=False
        Also return each answer's calibrated confidence, as ``clf.predict_confidence`` gives it
        (float32; the model's own probability when ``clf.answer_.calibrator`` is None).

    Returns
    -------
    ServingModule
        ``module(X)`` returns ``(paths, log_prob)`` (and ``confidence`` when asked): paths of
        node ids (indices into ``clf.classes_``; ``-1`` pads), equal to ``clf.predict`` through
        ``clf.classes_``. ``X`` is a dense float tensor (sparse features made dense).
        A row that ``predict`` would refuse or cannot decide (a NaN or an infinity in the
        row of ``X``, a NaN or ``+inf`` in its scores) gets the empty path (all -1) and
        log-probability NaN: a serving runtime answers every row and cannot raise for one.

    Raises
    ------
    TypeError
        For a :class:`~hiclass_parallel.estimators.MultiLabelHierarchicalClassifier`: its
        network scores the DAG's unrolled tree, whose node ids are copies, not indices into
        ``classes_``, and its answers are label sets, not one path; and anything that is not a
        :class:`~hiclass_parallel.estimators.HierarchicalClassifier`.
    ValueError
        For ``decoding="threshold"`` or terminal semantics without stop scores.

    Notes
    -----
    Where the answer model's class prototypes or linear terms re-rank the answer (``answer_``,
    a term with a weight above 0), the module re-ranks the same way
    (:class:`AnswerReranker`): the model's ``prototype_candidates`` most probable answers,
    scored exhaustively, each term by its own export module with its fitted arrays as buffers
    (the prototypes: a float32 row per class for dense input, 32 features per class for sparse
    input, which the module takes made dense; the linear terms: their SVMs' weights).

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import HierarchicalClassifier, serving_module
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=200, n_features=8, branching=2, depth=2, random_state=0)
    >>> clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, y)
    >>> paths, log_prob = serving_module(clf)(torch.from_numpy(X[:5]))
    >>> bool((clf.classes_[paths.numpy()] == clf.predict(X[:5])).all())
    True
    """
    semantics = _check_exportable(clf, semantics)
    module = copy.deepcopy(clf.net_.module_).to("cpu").eval()
    decoder = TreeDecoder(clf.tree_, clf.partition_, clf.stop_, semantics)
    reranker, calibration = _answer_parts(clf, decoder, confidence)
    return ServingModule(module, decoder, calibration, reranker).eval()


def _check_exportable(clf: Any, semantics: str | None) -> str:
    """The semantics to export ``clf`` with, or the error naming why it cannot be exported.

    Every export route calls it first, before anything optional is imported, so that an
    estimator no route exports is refused by name rather than by a missing exporter package."""
    from sklearn.utils.validation import check_is_fitted


    if isinstance(clf, MultiLabelHierarchicalClassifier):
        raise TypeError(
            f"{type(clf).__name__} is not exported: its network scores the hierarchy's unrolled tree "
            "(clf.tree_), whose node ids are copies of the classes, not indices into clf.classes_, and its "
            "answers are label sets, not one path; serve it with clf.predict or clf.predict_proba "
            "(pickle the fitted classifier)"
        )
    if not isinstance(clf, HierarchicalClassifier):
        raise TypeError(
            f"{type(clf).__module__}.{type(clf).__qualname__} is not exported: export takes a fitted "
            "HierarchicalClassifier (of a ClassTextClassifier, its classifier_, which reads the vectorizer's "
            "features)"
        )
    check_is_fitted(clf)
    if clf.decoding != "best":
        raise ValueError(f"only decoding='best' is exported; this classifier has decoding={clf.decoding!r}")
    semantics = clf.semantics if semantics is None else semantics
    if semantics == "terminal" and not clf.stop_:
        raise ValueError("semantics='terminal' needs a model trained with stop scores (stop=True)")
    return semantics


def _example(clf: Any, example: Any) -> torch.Tensor:
    if example is None:
        return torch.zeros((2, clf.n_features_in_), dtype=torch.float32)
    if not isinstance(example, torch.Tensor):
        example = np.asarray(example.toarray() if hasattr(example, "toarray") else example, dtype=np.float32)
        example = torch.from_numpy(example)
    return example.to(torch.float32)


def export_program(clf: Any, example: Any = None, semantics: str | None = None,
                   confidence: bool = False) -> torch.export.ExportedProgram:
    """``torch.export`` of :func:`serving_module` with a dynamic batch size.

    Parameters
    ----------
    clf : HierarchicalClassifier
        A fitted classifier with ``decoding="best"``.
    example : array-like or torch.Tensor of shape (n, n_features), default=None
        A batch to trace with (``n >= 2``); ``None``: zeros of batch 2.
    semantics : {"partial", "terminal"}, default=None
    confidence : bool, default=False
        Also output the calibrated confidence (:func:`serving_module`).

    Returns
    -------
    torch.export.ExportedProgram
        ``program.module()(X)`` gives ``(paths, log_prob)`` (and ``confidence``) for any batch size of
        float32 ``X`` (the exported graph checks the dtype); ``torch.export.save`` stores it.
        A row of ``X`` holding a NaN or an infinity gets the empty path (all -1) and
        log-probability NaN, as in :func:`serving_module`.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import HierarchicalClassifier, export_program
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=200, n_features=8, branching=2, depth=2, random_state=0)
    >>> clf = HierarchicalClassifier(tree, max_epochs=2, random_state=0).fit(X, y)
    >>> program = export_program(clf)
    >>> paths, _ = program.module()(torch.tensor(X[:7], dtype=torch.float32))
    >>> bool((clf.classes_[paths.numpy()] == clf.predict(X[:7])).all())
    True
    """
    module = serving_module(clf, semantics, confidence)
    X = _example(clf, example)
    batch = torch.export.Dim("batch", min=1)
    return torch.export.export(module, (X,), dynamic_shapes={"X": {0: batch}})


def export_onnx(
    clf: Any, path: str | os.PathLike, example: Any = None, semantics: str | None = None, opset: int = 18,
    confidence: bool = False,
) -> str:
    """Write :func:`serving_module` as an ONNX file with a dynamic batch size.

    Needs the ``export`` extra (``onnx``, ``onnxscript``; ``onnxruntime`` to run it).

    Parameters
    ----------
    clf : HierarchicalClassifier
        A fitted classifier with ``decoding="best"``.
    path : str or path-like
        The ``.onnx`` file to write.
    example : array-like or torch.Tensor of shape (n, n_features), default=None
        A batch to trace with; ``None``: zeros of batch 2.
    semantics : {"partial", "terminal"}, default=None
    opset : int, default=18
        ONNX opset (18 or later: the group maxima are ``ScatterElements`` with
        ``reduction="max"``).
    confidence : bool, default=False
        A third output ``confidence`` (float32, ``(batch,)``): the calibrated confidence of
        each answer (:func:`serving_module`).

    Returns
    -------
    str
        The path written. The graph has one input ``X`` (float32, ``(batch, n_features)``)
        and two outputs, ``paths`` (int64, ``(batch, n_levels)``, node ids padded with -1)
        and ``log_prob`` (float32, ``(batch,)``). A row of ``X`` holding a NaN or an
        infinity gets the empty path (all -1) and log-probability NaN, as in
        :func:`serving_module`.

    Raises
    ------
    TypeError, ValueError
        For a classifier no route exports, as :func:`serving_module` says, checked before
        ``onnx`` and ``onnxscript`` are imported (so the classifier is named even where they
        are missing).
    ImportError
        When ``onnx`` or ``onnxscript`` is missing.
    """
    _check_exportable(clf, semantics)  # an estimator no route exports is named before the exporter is imported
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as exc:
        raise ImportError("ONNX export needs onnx and onnxscript: pip install 'hiclass_parallel[export]'") from exc
    import logging
    import warnings

    module = serving_module(clf, semantics, confidence)
    X = _example(clf, example)
    batch = torch.export.Dim("batch", min=1)
    outputs = ["paths", "log_prob"] + (["confidence"] if confidence else [])
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)  # the exporter logs a notice per torchvision op it cannot register
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's own deprecation and tracing notices
            program = torch.onnx.export(
                module, (X,), input_names=["X"], output_names=outputs, opset_version=opset,
                dynamic_shapes={"X": {0: batch}}, dynamo=True, verbose=False,
            )
    finally:
        logger.setLevel(level)
    program.save(str(path))
    return str(path)
