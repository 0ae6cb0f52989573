"""The prediction side of :class:`HierarchicalClassifier`: scores, probabilities, paths, score.

Every method here runs the module over X through one loop (:meth:`_per_batch` over
:meth:`TreeNet.outputs <hiclass_parallel.estimators.networks._net.TreeNet.outputs>`), applies a
tensor function to each mini-batch on the net's device, and concatenates the results on the
host. The decoded answer (``predict``, ``predict_node``, ``predict_labels``, ``predict_top_k``,
``predict_confidence``) is :func:`~._decode.decode`'s, the one dispatcher of every
predict-time decision (model paths, re-ranking, decoding rule, output form), reading a
:class:`~._decode.Decoder` of the fitted state.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral
from typing import Any

import numpy as np
import torch
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_consistent_length, check_is_fitted

from ...metrics import hierarchical_f1_score
from ...metrics._paths import tree_label_paths
from ...ops.groups import group_log_softmax, node_log_probs
from ...tree import PAD
from .._checks import check_decidable, check_prediction_params, inference_batch_size, warn_unprepared_terms
from ..answer import last_nodes
from ._decode import Decoder, check_semantics, decode, decoder_of

__all__ = ["PredictMixin"]


class PredictMixin:
    """``decision_function``, ``predict_*`` and ``score`` of :class:`HierarchicalClassifier`."""

    def _per_batch(self, X: Any, fn: Callable[[torch.Tensor], Any], hidden: bool = False) -> tuple[np.ndarray, ...]:
        """``fn`` of each mini-batch's scores (or hidden representation), concatenated on the host.

        ``fn`` returns a tensor or a tuple of tensors; the result is one array per element.
        """
        check_is_fitted(self)
        check_prediction_params(self)
        X = self._validate_X(X, reset=False)
        parts = []
        # batch_size is an inference setting too: a value set after fit applies at once, to
        # this loop only (the fitted net keeps its own until training continues).
        for out in self.net_.outputs(self._dataset(X), hidden=hidden, batch_size=inference_batch_size(self.batch_size)):
            result = fn(out)
            parts.append([t.cpu().numpy() for t in (result if isinstance(result, tuple) else (result,))])
        return tuple(np.concatenate(column) for column in zip(*parts))

    def _decode_kwargs(self) -> dict[str, Any]:
        check_is_fitted(self)
        check_prediction_params(self)  # set_params after fit validates nothing
        check_semantics(self.semantics, self.stop_)
        return {"partition": self.partition_, "stop": self.stop_, "semantics": self.semantics}

    def _n_candidates(self) -> int:
        """Number of candidate answers: every node (terminal semantics) or every leaf."""
        return self.tree_.n_classes if self.semantics == "terminal" else int(self.tree_.is_leaf.sum())

    def _decoder(self) -> Decoder:
        """The :class:`~._decode.Decoder` of the fitted state (its net, tree, prototypes) and
        the prediction settings as they are now."""
        check_prediction_params(self)
        self._decode_kwargs()  # fitted, the settings valid, the semantics possible
        warn_unprepared_terms(self)
        return decoder_of(self, self.net_, self.targets_, self.config_, self.answer_,
                          rows=lambda X: self._validate_X(X, reset=False))

    def _decode(self, X: Any, k: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Best (``k=None``: one path, ``decoding`` applies) or top-``k`` paths of node ids and
        their log-probabilities: :func:`~._decode.decode`, the one dispatcher of the answer."""
        paths, log_prob, _ = decode(self._decoder(), X, k)
        return paths, log_prob

    def _reranking_candidates(self, X: Any, k: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The model's ``prototype_candidates`` (at least ``k``) best paths of each row, their
        log-probabilities and their answers' similarities to the rows."""
        decoder = self._decoder()
        return decoder.candidates(decoder.rows(X), k)

    def _decode_model(self, X: Any, k: int | None) -> tuple[np.ndarray, np.ndarray]:
        """The model's own best (``k=None``) or top-``k`` paths (stage 1 of
        :func:`~._decode.decode`, no re-ranking, no rule but threshold's)."""
        decoder = self._decoder()
        paths, log_prob, _ = decoder.model_paths(decoder.rows(X), k)
        return paths, log_prob

    def decision_function(self, X: Any) -> np.ndarray:
        """Raw scores of the module.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray of float32 of shape (n_samples, n_scores_)
            The first ``n_classes`` columns follow ``classes_``; with ``stop_`` the stop
            scores follow, one per group except group 0 (see :meth:`predict_stop_proba`).
        """
        return self._per_batch(X, lambda scores: scores)[0]

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Log of :meth:`predict_proba`, computed in log space.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of float32 of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        C = self.tree_.n_classes
        return self._per_batch(
            X, lambda s: group_log_softmax(s[:, :C].contiguous(), self.tree_, partition=self.partition_, stop=False)
        )[0]

    def predict_proba(self, X: Any) -> np.ndarray:
        """Probability of each class within its group, in ``classes_`` order.

        Under ``partition="level"`` a group is a level: column ``c`` is the probability that
        the sample's class at the depth of ``c`` is ``c``. Under ``"sibling"`` a group is a
        set of siblings: column ``c`` is the probability of ``c`` given its parent. Each
        group's columns sum to 1.

        With ``stop_``, a group's softmax also includes its stop score. The probabilities
        here are conditional on the path going on into the group (stop excluded and the
        rest renormalised), so each group still sums to 1; :meth:`predict_stop_proba` gives
        the stop probabilities, and ``proba * (1 - stop)`` the unconditional ones.

        So a row sums to the number of groups (``n_levels_`` under ``"level"``), not to 1:
        these are per-group (per-level or per-parent) probabilities, not one distribution
        over the classes. For the distribution over the possible answers, which sums to 1,
        use :meth:`predict_answer_proba`.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of float32 of shape (n_samples, n_classes)
        """
        return np.exp(self.predict_log_proba(X))

    def predict_stop_proba(self, X: Any) -> np.ndarray:
        """Probability of each group's stop score (models fitted with ``stop=True``).

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        stop_proba : ndarray of float32 of shape (n_samples, n_scores_ - n_classes)
            Column ``j`` is the stop of group ``j + 1`` (group 0 has none): the probability
            that the path ends just above that group, given that it reached the group's
            parent level. Under ``"level"``, column ``d`` is "the path ends at depth ``d``";
            under ``"sibling"``, the column of an internal node ``n`` is "the path ends at
            ``n``". ``hiclass_parallel.ops.groups.stop_columns(tree_, partition_) - n_classes``
            gives each internal node's column.
        """
        check_is_fitted(self)
        if not self.stop_:
            raise ValueError("this model has no stop scores: fit it with stop=True (or semantics='terminal')")
        C = self.tree_.n_classes
        return self._per_batch(
            X, lambda s: torch.exp(group_log_softmax(s, self.tree_, partition=self.partition_, stop=True)[:, C:])
        )[0]

    def predict_answer_proba(self, X: Any) -> np.ndarray:
        """Probability of each class being the answer: one distribution per sample, summing to 1.

        The answers are the candidates of decoding: the leaves under ``semantics="partial"``
        (internal nodes get 0), every node under ``"terminal"``. A candidate's probability is
        its path probability (``exp`` of :func:`~hiclass_parallel.ops.node_log_probs`, with
        the stop term under ``"terminal"``) divided by the row's sum over the candidates. Under
        the sibling partition (stop scores matching the semantics) the path probabilities
        already sum to 1 and the division changes nothing but rounding; under the level
        partition they need it. The argmax of a row is :meth:`predict_node` with
        ``decoding="best"``. A row with NaN or ``+inf`` scores is all NaN.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of float32 of shape (n_samples, n_classes)
            Columns follow ``classes_``; each row sums to 1.
        """
        kwargs = self._decode_kwargs()
        candidate = np.ones(self.tree_.n_classes, dtype=bool) if self.semantics == "terminal" else self.tree_.is_leaf
        (logp,) = self._per_batch(X, lambda s: node_log_probs(s, self.tree_, **kwargs))
        logp[:, ~candidate] = -np.inf
        with np.errstate(invalid="ignore"):
            proba = np.exp(logp - logp.max(axis=1, keepdims=True))
            return proba / proba.sum(axis=1, keepdims=True)

    @available_if(lambda self: type(self)._calibrates)
    def predict_confidence(self, X: Any) -> np.ndarray:
        """Probability that the answer :meth:`predict` gives is right.

        The model's probability of the decoded path (its joint probability, the stop term
        included under ``semantics="terminal"``), mapped by the answer model's calibrator
        (``answer_.calibrator``) when the fit was calibrated (``calibration``), else as the
        model gives it. Right means: the path ends
        at the true class (``"terminal"``), or passes through it (``"partial"``, where a label
        above the leaves leaves the finer class open). With ``decoding="hf1"`` the answer may
        be an ancestor of the most probable path; its probability here is that of the path it
        was taken from among the ``top_k``, mapped by a calibrator fitted for the decoding
        that was set at fit time.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        confidence : ndarray of float64 of shape (n_samples,)
            In [0, 1], non-decreasing in the model's own probability of its answer.

        Examples
        --------
        >>> from hiclass_parallel.datasets import make_hierarchical_classification
        >>> from hiclass_parallel.estimators import HierarchicalClassifier
        >>> X, y, tree = make_hierarchical_classification(
        ...     n_samples=2500, n_features=8, branching=3, depth=2, random_state=0)
        >>> clf = HierarchicalClassifier(tree, max_epochs=3, random_state=0).fit(X, y)
        >>> clf.answer_.calibrator.n_rows   # 5% of the rows, held out of training (3 epochs)
        125
        >>> conf = clf.predict_confidence(X[:5])
        >>> conf.shape, bool(((conf >= 0) & (conf <= 1)).all())
        ((5,), True)
        """
        paths, log_prob = self._decode(X, None)
        check_decidable(int(np.isnan(log_prob).sum()), paths.shape[0], self.net_.lr)
        probability = np.exp(log_prob.astype(np.float64))
        calibrator = self.answer_.calibrator
        return probability if calibrator is None else calibrator(probability)

    def _predict_ids(self, X: Any) -> np.ndarray:
        """Decoded paths of node ids, (n_samples, n_levels_), padded with -1."""
        paths, log_prob = self._decode(X, None)
        check_decidable(int(np.isnan(log_prob).sum()), paths.shape[0], self.net_.lr)  # NaN: NaN/+inf scores
        return paths

    def _node_labels(self) -> np.ndarray:
        """The label of every node id of ``tree_`` (``classes_``)."""
        return self.classes_

    def _label_lookup(self, labels: np.ndarray | None = None) -> np.ndarray:
        """The nodes' labels (or ``labels``) with the pad label appended: indexing it with -1
        gives the pad."""
        labels = self._node_labels() if labels is None else labels
        pad = self.pad_label_
        if labels.dtype.kind in "iu" and isinstance(pad, (int, np.integer)) and not isinstance(pad, bool):
            return np.append(labels, np.int64(pad))
        out = np.empty(labels.size + 1, dtype=object)
        out[:-1] = labels
        out[-1] = pad
        return out

    def _answers(self) -> np.ndarray | None:
        """The path string of every node, the pad appended, when answers are path strings
        (``path_sep``); ``None`` when they are paths of names."""
        targets = getattr(self, "targets_", None)
        strings = None if targets is None or not hasattr(targets, "answers") else targets.answers()
        return None if strings is None else self._label_lookup(strings)

    def _path_lookup(self) -> np.ndarray:
        """The nodes' names in predicted paths, the pad appended: the labels, unless names
        repeat under different parents (labels are then paths, and paths hold the names)."""
        if getattr(self.tree_, "has_names", False):
            return self._label_lookup(self.tree_.names)
        return self._label_lookup()

    def predict(self, X: Any) -> np.ndarray:
        """Predict ancestral paths of labels, always valid paths of the tree.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        paths : ndarray of shape (n_samples, n_levels_), or (n_samples,) with ``path_sep``
            Names from the top level down, as label paths are given in ``y``, right-padded
            with ``pad_label_`` (``""`` for string labels, ``-1`` for integer labels, unless
            ``pad_label`` says otherwise). Integer labels give an int64 array; other labels
            an object array. With ``path_sep``: one path string per sample, the names joined
            with it (``pad_label_`` for an empty path).
        """
        ids = self._predict_ids(X)
        strings = self._answers()
        if strings is not None:
            return strings[last_nodes(ids[:, None, :])[:, 0]]
        return self._path_lookup()[ids]

    def predict_node(self, X: Any) -> np.ndarray:
        """Node id of the last node of each predicted path.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        nodes : ndarray of int64 of shape (n_samples,)
            Indices into ``classes_`` (and ``tree_``): node identity without label look-ups.
            ``-1`` for an empty path: ``decoding="threshold"`` with no top-level node at the
            threshold, or scores holding NaN or ``+inf`` (a ``RuntimeWarning`` says so).
        """
        paths = self._predict_ids(X)
        depth = (paths != PAD).sum(axis=1) - 1
        return paths[np.arange(paths.shape[0]), depth]

    def predict_labels(self, X: Any) -> np.ndarray:
        """Label of the last node of each predicted path: one label per sample.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Elements of ``classes_``, or ``pad_label_`` for an empty path (no node: see
            :meth:`predict_node`), never the label of a node that was not predicted.
        """
        nodes = self.predict_node(X)
        return self._label_lookup()[nodes]  # index -1 is the pad, not the last class

    def predict_top_k(self, X: Any, k: int | None = None, return_log_prob: bool = False) -> Any:
        """The ``k`` most probable valid paths of each sample, best first.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        k : int, default=None
            Number of paths; ``None`` means the ``top_k`` parameter. At most the number of
            candidate nodes (leaves for ``semantics="partial"``, all nodes for ``"terminal"``).
        return_log_prob : bool, default=False
            Also return each path's joint log-probability.

        Returns
        -------
        paths : ndarray of shape (n_samples, k, n_levels_), or (n_samples, k) with ``path_sep``
            Label paths, padded as in :meth:`predict`; with ``path_sep``, path strings.
        log_prob : ndarray of float32 of shape (n_samples, k)
            Only when ``return_log_prob``.
        """
        self._decode_kwargs()  # fitted, and the semantics possible: checked before k
        k = self.top_k if k is None else k
        if isinstance(k, bool) or not isinstance(k, Integral):
            raise TypeError(f"k must be an integer number of paths, got {k!r} ({type(k).__name__})")
        n_candidates = self._n_candidates()
        if not 1 <= k <= n_candidates:
            raise ValueError(f"k={k} must be between 1 and the number of candidate paths ({n_candidates})")
        paths, log_prob = self._decode(X, k)
        check_decidable(int(np.isnan(log_prob[:, 0]).sum()), paths.shape[0], self.net_.lr)
        strings = self._answers()
        labels = self._path_lookup()[paths] if strings is None else strings[last_nodes(paths)]
        return (labels, log_prob) if return_log_prob else labels

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Hierarchical F1 (micro-averaged over samples) of :meth:`predict` against ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            True labels at any depth, or label paths.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
            :func:`hiclass_parallel.metrics.hierarchical_f1_score`; higher is better, 1 is
            a perfect match of every path.
        """
        check_is_fitted(self)
        # y in any form fit takes; a class the tree lacks (a held-out class no training row had)
        # is a miss under its known ancestors, and a warning says how many rows held one.
        sep = getattr(getattr(self, "targets_", None), "sep", None)
        true = tree_label_paths(y, self.tree_, pad_label=self.pad_label_, path_sep=sep)
        check_consistent_length(X, true)
        pred = self._predict_ids(X)
        # Node-id paths, not labels: node identity without a second label look-up.
        return float(hierarchical_f1_score(true, pred, input_type="ids", sample_weight=sample_weight))
