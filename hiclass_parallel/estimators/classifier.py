"""``HierarchicalClassifier``: one neural network over the whole tree, a scikit-learn citizen.

The classifier wraps a skorch :class:`~skorch.NeuralNet` (a plain ``NeuralNet`` subclass: the
targets it trains on are node ids scored by the tree loss, and ``NeuralNetClassifier``'s
accuracy scoring and stratified split do not apply to them). The wrapper owns everything
scikit-learn sees: parameters stored unchanged in ``__init__``, validation in ``fit``, fitted
state ending in ``_``; the skorch net it builds is the fitted attribute ``net_``.

Data flow: ``y`` (labels at any depth, or label paths) -> node ids (``PathEncoder``'s
reading) -> ``HierarchicalCrossEntropy`` over all levels at once (the lean loss: no
``(B, L, C)`` tensor) -> at prediction, exact decoding of the best valid path per sample.

This module holds the parameters and their documentation. Fitting is one pipeline
(``fitting/_fit``: prepare -> build -> train) over a label encoder (``fitting/_targets``), one
resolved configuration (``fitting/_config``, from the module's capabilities in
``networks/_capabilities``) and the net built from it (``fitting/_build``, ``networks/_net``);
``fitting/_params`` holds the prefixed skorch parameters and ``prediction/_predict`` the
prediction side (``decision_function``, ``predict_*``, ``score``), whose answers are decided by
one dispatcher (``prediction/_decode``).
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import torch
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Interval, Options, RealNotInt, StrOptions

from ..tree import PARTITIONS, Tree
from ._checks import NotBool, validate_X
from .fitting import TRAINING, NetParamsMixin, PathTargets, keep_fitted_state_on_error, run_fit, run_grow
from .networks import TreeDataset
from .prediction import PredictMixin

if TYPE_CHECKING:
    from .answer import AnswerModel

__all__ = ["HierarchicalClassifier"]


# ---------------------------------------------------------------------------- the estimator
class HierarchicalClassifier(NetParamsMixin, PredictMixin, ClassifierMixin, BaseEstimator):
    """A neural hierarchical classifier: one network, labels at any depth, valid paths out.

    The module (by default :class:`SparseMLP` for sparse ``X`` and for dense ``X`` of
    normalised rows, :class:`MLP` for other dense ``X``) produces one score per class of the
    tree (plus one "stop" score per group with
    ``stop=True``). Training minimises the tree cross-entropy at every labelled level of every
    sample in parallel: by default under the sibling partition and path-locally (each sample
    scores only the softmax groups on its labelled path,
    :class:`~hiclass_parallel.losses.PathLocalCrossEntropy`), with ``partition="level"`` over
    every score (:class:`~hiclass_parallel.losses.HierarchicalCrossEntropy`, memory
    O(batch x classes)). Prediction decodes, for each sample independently, the valid
    ancestral path with the highest joint log-probability (exact, not a beam search;
    best-first by default, scoring only the groups it expands). Built on skorch: its parameters
    pass through and are tunable with ``GridSearchCV``.

    Parameters
    ----------
    tree : Tree, default=None
        The class tree. ``None`` learns it in :meth:`fit` from ``y``: label paths (2-D ``y``,
        ragged lists, a DataFrame of levels) or, with ``path_sep``, path strings give the
        hierarchy; other 1-D labels give a flat tree (every label a top-level class), with a
        warning when they look like path strings. A class is its path: a name repeated under
        different parents ("Accessories" under "Electronics" and under "Clothing") is two
        classes, whose labels (``classes_``) are then their paths of names
        (:meth:`Tree.from_paths <hiclass_parallel.Tree.from_paths>`).
    module : type of torch.nn.Module, default=None
        The network class (not an instance); ``None`` means :class:`SparseMLP` for a scipy
        sparse ``X`` (text features: cost per row follows its non-zeros) and for a dense ``X``
        whose rows all have length 1 (normalised sentence embeddings, fed as dense rows to the
        fused C training step), and :class:`MLP` for any other dense ``X`` (and for dense
        label sets); ``config_.step_engine_reason`` says which rule chose it. It is built with
        the ``module__*`` parameters, plus ``n_features`` (from ``X``) and ``n_outputs``
        (from the tree) when its ``__init__`` accepts them. It must map a float32 batch
        ``(batch, n_features)`` to scores ``(batch, n_scores_)``. A module whose class has
        ``accepts_sparse = True`` gets sparse input as torch sparse CSR batches (others get
        dense batches); one with ``encode(X)`` and ``scorer(hidden)`` methods (as
        :class:`MLP` and :class:`SparseMLP`) is trained path-locally and decoded best-first
        under the sibling partition.
    partition : {"auto", "level", "sibling"}, default="auto"
        How classes are grouped into mutually exclusive softmax groups: by depth (the
        paper's method) or by parent (a conditional softmax). ``"auto"``: ``"sibling"`` for
        a module that scores columns on demand (both default modules, :class:`MLP` and
        :class:`SparseMLP`), where each row then pays only for the groups on its path;
        ``"level"`` otherwise.
    stop : bool, default=None
        Add one "stop" score per group (but the top level's), so that a label at an internal
        node also teaches the model that the path ends there: training then reads such
        labels as terminal answers (override with ``criterion__semantics="partial"``).
        ``None`` means ``semantics == "terminal"``.
    semantics : {"partial", "terminal"}, default="partial"
        What a label at an internal node means. ``"partial"``: a coarse label, the finer
        class is unknown (the paper's reading); predictions end at leaves. ``"terminal"``:
        the node itself is the answer; predictions may end at any node (needs ``stop``).
        Used at prediction time; may be changed after fitting.
    training : {"auto", "path_local", "full"}, default="auto"
        Which scores a training step computes. ``"path_local"``: each sample scores only the
        softmax groups on its labelled path (exact sibling cross-entropy; cost per row follows
        the path, not the tree) and prediction decodes best-first; it needs the sibling
        partition and a module that scores columns on demand (``encode``/``scorer``, as
        :class:`MLP` and :class:`SparseMLP`), else it is an error. ``"full"``: every score of
        every sample (:class:`~hiclass_parallel.losses.HierarchicalCrossEntropy`, which takes
        ``criterion__level_weights`` and the other parameters of that loss). ``"auto"``:
        ``"path_local"`` where possible, else ``"full"``. A ``criterion__*`` parameter the
        chosen route's loss does not take is an error naming it.
    softmax_sample : int, "auto" or None, default="auto"
        Training cost of wide sibling groups. A group wider than this many columns (a flat
        level with thousands of classes, such as a forest's roots) is trained, in each
        mini-batch, on a sampled softmax of this many candidates shared by the batch: the
        batch's own target columns in the group, and others drawn uniformly at random, whose
        scores get the sampled-softmax correction ``log(1 / Q)`` (``Q``: their chance of being
        drawn), so that a row's cost follows its path rather than the widest group on it.
        Prediction is always exact (every column of every group it expands). ``"auto"``:
        1024 (:data:`~hiclass_parallel.estimators.fitting._config.SOFTMAX_SAMPLE`); ``None``:
        every softmax exact. It applies to the fused (CPU) and device (CUDA) training steps of
        the default text model (``config_.step_engine`` ``"fused"`` or ``"device"``); the torch
        route is always exact.
        ``config_.softmax_sample`` is the limit used (0: exact) and
        ``config_.softmax_sample_reason`` says why.
    decoding : {"best", "threshold", "hf1"}, default="best"
        ``"best"``: the valid path with the highest joint log-probability (the most
        probable answer: best for exact accuracy). ``"threshold"``: the path cut at its
        deepest node whose probability is at least ``threshold``. ``"hf1"``: among the
        ``top_k`` most probable answers and their ancestors, the path of highest expected
        hierarchical F1 (:func:`~hiclass_parallel.ops.expected_hf1_paths`): trades some
        exact accuracy for hF1 by backing off to a common ancestor when rivals split the
        mass. With class prototypes (``prototypes``) the candidates are the
        ``max(top_k, prototype_candidates)`` most probable answers, weighed by the fitted
        ``softmax(scale * (log p + weight * similarity))`` instead of the model's own
        probabilities.
    threshold : float, default=0.5
        Cut-off of ``decoding="threshold"``.
    top_k : int, default=5
        Number of paths :meth:`predict_top_k` returns by default.
    pad_label : hashable, default=None
        Pads predicted label paths (and is read as padding in label paths given as ``y``).
        ``None`` means ``""`` for string labels and ``-1`` for integer labels.
    path_sep : str, default=None
        The separator of path strings: with it, each 1-D label is a path from the top level
        down, such as ``"Electronics/Accessories/Cables"`` (split on ``path_sep`` exactly,
        spaces included: ``" > "`` for ``"Electronics > Cables"``), the tree learnt from
        ``y`` labels each class by its path string, and the answers come back as path
        strings: :meth:`predict` gives one per sample (a 1-D array, like ``y``) and
        :meth:`predict_top_k` ``(n_samples, k)``. ``None``: labels are names, and answers are
        paths of names (a 2-D array, like label paths given as ``y``).
    optimizer : type of torch.optim.Optimizer, default=None
        Optimizer class; ``optimizer__*`` parameters pass to it. ``None`` means
        :class:`LazyAdam` for modules with sparse gradients (:class:`SparseMLP`: only the
        rows of the features and classes in a batch are updated) and ``torch.optim.Adam``
        otherwise. Adam and AdamW use torch's fused kernel on CPU and CUDA (one kernel per
        step instead of one per tensor, which counts on large output layers) unless
        ``optimizer__fused`` or ``optimizer__foreach`` is given.
    lr : float, default=None
        Learning rate. ``None``: 0.005 for modules with sparse input (:class:`SparseMLP`,
        trained by :class:`LazyAdam`), 0.003 otherwise.
    max_epochs : int, default=None
        Passes over the data in :meth:`fit` (fewer with early stopping). ``None``: 10, or
        for :class:`SparseMLP` (text) ``35 / sqrt(steps per epoch)`` rounded to the nearest,
        within [2, 30]: the text model's held-out accuracy peaks after about
        ``35 x sqrt(steps per epoch)`` steps in all at lr 0.005, so bigger data sets need more
        steps, but fewer passes.
    batch_size : int or "auto", default="auto"
        Mini-batch size for training and prediction (``-1``: the whole data set). ``"auto"``:
        256, except that the text model (:class:`SparseMLP`) trains a fit of fewer than 1,024
        rows in smaller batches, halved down to 32 while an epoch would have fewer than 4 steps
        (more, smaller steps train a more accurate model on a few hundred rows); prediction
        runs in batches of 256. ``config_.batch_size`` is the training batch and
        ``config_.batch_size_reason`` says why.
    train_split : callable, default=None
        skorch's validation split, ``train_split(dataset, y=None) -> (train, valid)``.
        ``None``: no validation split, unless ``early_stopping`` asks for one. Avoid
        ``skorch.dataset.ValidSplit(..., stratified=True)``: labels at any depth seldom
        support stratification.
    callbacks : list of skorch callbacks, default=None
        Extra skorch callbacks (copied at fit, never modified).
    early_stopping : bool, default=False
        Stop when the validation loss has not improved by ``tol`` for ``n_iter_no_change``
        epochs, and restore the best weights. Holds out a random (non-stratified)
        ``validation_fraction`` of the samples unless ``train_split`` is given.
    validation_fraction : float, default=0.1
        Held-out fraction for ``early_stopping``.
    n_iter_no_change : int, default=5
        Patience of ``early_stopping``, in epochs.
    tol : float, default=1e-4
        Relative improvement of the validation loss that counts for ``early_stopping``.
    warm_start : bool, default=False
        When True, :meth:`fit` continues training the fitted network instead of starting
        afresh. Parameters changed since the network was built reach it where a trained
        network can take them (``lr``, ``optimizer__*``, ``criterion__*``, ``iterator_*``...,
        through skorch); those it is built from (``module__*``, ``callbacks``, ``device``...)
        are named in a warning and wait for a fresh fit (the docs' classifier page, "Changing
        parameters after fit").
    calibration : {"auto", "beta"} or None, default="auto"
        Calibrate the probability of the predicted answer (:meth:`predict_confidence`):
        ``fit`` holds out ``calibration_size`` rows, trains on the others, and fits a monotone
        map from the model's probability of its answer to the chance that the answer is right
        on the held-out rows (beta calibration, three parameters). A text model (sparse
        ``X``) with 5 epochs or more fits the map before the last epoch, which then trains on
        every row; with fewer (bigger data sets), and on dense ``X``, where such a late
        epoch moves every weight, the held-out rows stay out of training. ``"auto"``: where the fit
        allows it (arrays, ``fit`` rather than ``partial_fit``, no ``train_split`` or
        ``early_stopping``, at least 100 held-out rows), else not; ``"beta"``: always, an error
        where it cannot; ``None``: never (every row trains). The network's own probability is
        overconfident; the map corrects it (``docs/calibration.md``; measured in
        ``docs/performance.md``). Sparse held-out rows are shown to the model without the
        features no training row has, as a fitted vectorizer shows a new document.
    calibration_size : "auto", float or int, default="auto"
        Rows held out of training to fit the calibration: ``"auto"`` is 5% of the rows, at
        most 1,000; a float in (0, 1) a fraction of the rows; an int a number of rows.
    prototypes : "auto", float or None, default="auto"
        Re-rank the answer with class prototypes: :meth:`predict` picks, among the model's
        ``prototype_candidates`` most probable answers, the one with the highest
        ``log p(answer) + weight * similarity(x, prototype)``. This gives every class evidence
        of its own over the input features, which the hidden layer's map lacks. Sparse ``X``
        (such as TF-IDF): each class keeps the sum of its training rows, compared by cosine.
        Dense ``X``: each class keeps its mean, shrunk towards its parent's, compared by a
        Gaussian log-likelihood with one pooled variance per feature (``docs/prototypes.md``;
        measured in ``docs/performance.md``). ``"auto"``: the weight is learnt, with the flat
        term's, on held-out rows (see ``flat_term``), and the prototypes are dropped where it
        comes out 0 or cannot be learnt; a float: that weight (not a bool: ``True`` is not ``"auto"``);
        ``None``: the model's own answer. Only the answer changes: probabilities and scores are
        the model's. This and the other settings prediction reads (``semantics``,
        ``decoding``, ``threshold``, ``top_k``, ``prototype_candidates``, ``batch_size``) may
        be changed after fit; prediction checks them as the constructor's constraints do.
    prototype_candidates : int, default=20
        How many of the model's most probable answers the prototypes (and the linear terms) re-rank.
    flat_term : "auto", float or None, default="auto"
        Re-rank the answer with a flat linear model too: one linear model per training target
        (one class against the rest: scikit-learn's ``LinearSVC`` on sparse rows, the
        least-squares SVM of the same regularisation, solved in closed form, on dense rows),
        whose margin for each candidate adds ``weight * margin`` to the re-ranked score (a
        candidate that was no training target gets margin -1). Where a flat linear model is as
        accurate as the network and errs on other rows (small taxonomies, sentence
        embeddings), the two together beat either (``docs/prototypes.md``). ``"auto"``: tried
        where its estimated cost is within half the network's estimated fit (on sparse rows the
        SVM against every row, else the SVM of the candidates: each target trained against the
        rows whose ``prototype_candidates`` most probable answers of the trained network hold
        it; on dense rows of unit length the closed form), and its weight learnt: every weight
        left at ``"auto"`` and the scale of the candidates' distribution are fitted together
        by maximum likelihood of the right answer among held-out rows' candidates (a
        conditional logit, L2-regularised towards 0), on rows neither the network nor the terms
        trained on: the calibration share where the fit holds one out, else, below 2,000 rows,
        2-fold cross-fitting (two more fits on half the rows each). A term that does not gain
        held-out likelihood is dropped (weight 0), and where no rows can be held out
        (``calibration=None`` on 2,000 rows or more, callbacks, torch tensors, ``partial_fit``)
        the terms left at ``"auto"`` are not built. A float: that weight, wherever the term can
        be fitted (an error where it cannot); ``None``: none. ``config_.terms_tried_reason``
        records each term's estimated cost against the budget, ``config_.term_weights_reason``
        each weight and held-out gain, ``answer_.weights["flat_term"]`` the weight used (no
        such term: none) and ``config_.flat_term_reason`` why (``docs/prototypes.md``,
        "Weights learnt on held-out rows"). Never with ``partial_fit``, streamed data,
        data-parallel training, or
        ``semantics="partial"`` with internal targets; continuing training drops it (with a
        warning). ``None`` or another weight may be set after fit.
    path_term : "auto", float or None, default="auto"
        Re-rank the answer with a path-level linear model too: one linear model per node on a
        training target's path (one node against the rest, a row positive for every node on
        its target's path: its answer and all the answer's ancestors), fitted as one
        multi-class SVM per level, whose margins summed along each candidate's path add
        ``weight * sum`` to the re-ranked score. Where the flat term compares the candidates'
        own classes, this one also credits a candidate whose ancestors the row resembles, so
        a rare class borrows from its parent's rows (``docs/prototypes.md``). ``"auto"``:
        tried where its estimated cost is within what the flat term leaves of the budget
        (the two together within half the network's estimated fit), its weight learnt with
        the others on held-out rows, and dropped where it does not gain, as ``flat_term``.
        A float: that weight, wherever the term can be fitted (an error where it cannot);
        ``None``: none. ``answer_.weights["path_term"]`` is the weight used (no such term:
        none) and ``config_.path_term_reason`` says why. The same limits as ``flat_term``
        (``partial_fit``, streams, data-parallel training, ``semantics="partial"`` with
        internal targets; dropped when training continues or the tree grows). ``None`` or
        another weight may be set after fit.
    verbose : int, default=0
        ``0``: silent. ``1`` or more: skorch's epoch log and a progress bar.
    device : str or torch.device, default="cpu"
        Where the network trains and predicts: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    random_state : int, RandomState instance or None, default=None
        Seeds weight initialisation, shuffling, dropout and the validation split. With an
        int, two fits on CPU give identical models. The global torch RNG is left as it was.
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes in the training loss, multiplied with ``sample_weight``: a row
        labelled with a class counts with that class's weight. A mapping ``label -> weight``
        (every class of that label; the others weigh 1); ``"balanced"``: ``n / (n_labelled_nodes
        * count(node))`` over the training rows, where ``count(node)`` is the (sample-weighted)
        number of rows labelled with the node, ``n`` their total and ``n_labelled_nodes`` the
        number of classes some row is labelled with (not in ``partial_fit``, whose rows do not
        tell the classes' frequencies); ``None``: all 1. It re-balances training only: the
        calibration and the class prototypes weigh rows by ``sample_weight`` alone. See the
        classifier page of the docs, "Sample and class weights".
    **kwargs
        skorch parameters with a prefix: ``module__*`` (e.g. ``module__hidden_units``,
        ``module__dropout``), ``optimizer__*`` (e.g. ``optimizer__weight_decay``),
        ``criterion__*`` (e.g. ``criterion__level_weights``), ``iterator_train__*``,
        ``iterator_valid__*`` (e.g. ``iterator_train__num_workers``), ``callbacks__*``.

    Attributes
    ----------
    tree_ : Tree
        The tree in use.
    classes_ : ndarray of shape (n_classes,)
        The label of every class, in node id order (the column order of :meth:`predict_proba`):
        the user's labels; for a tree learnt from paths whose names repeat, each class's path
        (a tuple of names); with ``path_sep``, its path string.
    n_levels_ : int
        Number of levels: the width of predicted paths.
    n_scores_ : int
        Number of scores the module produces per sample (classes, plus stops).
    stop_ : bool
        Whether the model has stop scores.
    partition_ : str
        The partition the model was trained with (``"auto"`` resolved).
    training_ : str
        The training route (``"path_local"`` or ``"full"``; ``training="auto"`` resolved).
    path_local_ : bool
        ``training_ == "path_local"``: training scored only the groups on each labelled
        path; prediction then decodes best-first.
    module_class_ : type
        The network class (``module``, or the default for ``X``).
    config_ : FitConfig
        Everything the fit resolved (module class and its capabilities, partition, stops,
        training route, lr, epochs, optimizer), frozen; the attributes above read it.
    targets_ : PathTargets
        The fitted label encoder (tree, pad label, classes).
    pad_label_ : hashable
        The pad label of predicted paths.
    n_features_in_ : int
        Number of features seen in :meth:`fit`.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen in :meth:`fit`, when ``X`` has string column names.
    answer_ : AnswerModel
        The answer model (``estimators/answer/_model.py``): how the network's paths become
        the answer. ``answer_.terms`` holds the fitted re-ranking terms by name:
        ``"prototypes"``, the class prototypes (per-class sums of the training rows:
        ``ClassPrototypes``, sparse, for sparse ``X``; ``GaussianPrototypes``, with counts and
        squares, for dense ``X``), absent with ``prototypes=None`` or a streamed data set;
        ``"flat_term"``, the flat linear term's SVM (``FlatMargins``: ``coef``, dense or for
        the SVM of the candidates a sparse CSR matrix, ``intercept`` and the target node ids
        ``classes``) and ``"path_term"``, the path-level term's SVMs (``PathMargins``: its
        ``margins``, a ``FlatMargins`` of every node on a training path), each fitted on the
        training rows (without the rows held out for calibration, when the fit holds some
        out), absent where the fit kept none and after training continues. ``answer_.weights`` holds each term's weight, ``answer_.scale`` the scale
        of the fitted conditional logit (``decoding="hf1"``), and ``answer_.calibrator`` the
        map from the probability of the predicted answer to the chance it is right
        (``BetaCalibrator``), fitted on held-out rows (``calibration``): ``None`` when the fit
        did not calibrate, and after training continues (``partial_fit``, ``warm_start``):
        it was fitted for the weights before.
    net_ : skorch.NeuralNet
        The fitted skorch net (``net_.module_`` is the torch module; ``net_.history`` the
        training history).

    See Also
    --------
    PathEncoder : the label <-> path mapping on its own.
    hiclass_parallel.datasets.make_hierarchical_classification : data to try it on.

    Notes
    -----
    ``X`` may be a dense NumPy array, a torch tensor (CPU or CUDA; kept where it is), a
    pandas DataFrame, or a scipy sparse matrix (kept sparse by :class:`SparseMLP`; a module
    without ``accepts_sparse`` gets it dense one mini-batch at a time). The defaults (the
    sibling partition trained path-locally and decoded best-first; for dense input
    :class:`MLP`, Adam, lr 0.003, batch 256, one hidden layer of 256 units, 10 epochs; for
    sparse input and normalised embeddings :class:`SparseMLP` with LazyAdam and lr 0.005, on
    the fused C step) favour speed on CPU for trees of up to 100,000 classes.

    Outputs are batch-invariant: in evaluation mode the module treats rows independently and
    decoding runs per row, so one sample's prediction does not depend on the rest of the
    batch (up to floating-point rounding of the matrix products).

    A fitted model pickles; a model trained on ``device="cuda"`` unpickles on a machine
    without a GPU onto the CPU (skorch maps it there, with a ``DeviceWarning``).

    Examples
    --------
    >>> from hiclass_parallel.datasets import make_hierarchical_classification
    >>> from hiclass_parallel.estimators import HierarchicalClassifier
    >>> X, y, tree = make_hierarchical_classification(
    ...     n_samples=300, n_features=8, branching=2, depth=2, random_state=0)
    >>> clf = HierarchicalClassifier(tree, max_epochs=20, random_state=0).fit(X, y)
    >>> clf.predict(X[:2]).shape
    (2, 2)
    >>> clf.predict_proba(X[:2]).shape
    (2, 6)
    >>> bool(clf.score(X, y) > 0.5)
    True

    Your own label paths, learning the tree from them: a name may repeat under different
    parents, and answers come back as the paths you gave (path strings with ``path_sep``):

    >>> import numpy as np
    >>> X = np.eye(4).repeat(10, axis=0)
    >>> paths = [["Electronics", "Other"], ["Electronics", "Cables"], ["Clothing", "Other"], ["Clothing", "Tops"]]
    >>> y = [p for p in paths for _ in range(10)]
    >>> clf = HierarchicalClassifier(max_epochs=30, random_state=0).fit(X, y)
    >>> clf.predict(np.eye(4)[[2, 0]])
    array([['Clothing', 'Other'],
           ['Electronics', 'Other']], dtype=object)
    >>> clf.predict_labels(np.eye(4)[[2]])  # a label is a class's path when names repeat
    array([('Clothing', 'Other')], dtype=object)
    >>> y_strings = ["/".join(p) for p in y]  # "Clothing/Other", ...
    >>> clf = HierarchicalClassifier(path_sep="/", max_epochs=30, random_state=0).fit(X, y_strings)
    >>> clf.predict(np.eye(4)[[2, 0]])
    array(['Clothing/Other', 'Electronics/Other'], dtype=object)
    """

    _parameter_constraints: dict = {
        "tree": [Tree, None],
        "module": "no_validation",  # checked in fit, with a message about classes vs instances
        "partition": [StrOptions({"auto", *PARTITIONS})],
        "training": [StrOptions(set(TRAINING))],
        "softmax_sample": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "stop": ["boolean", None],
        "semantics": [StrOptions({"partial", "terminal"})],
        "decoding": [StrOptions({"best", "threshold", "hf1"})],
        "threshold": [Interval(Real, 0, 1, closed="both")],
        "top_k": [Interval(Integral, 1, None, closed="left")],
        "pad_label": "no_validation",
        "path_sep": [str, None],
        "optimizer": [callable, None],
        "lr": [Interval(Real, 0, None, closed="neither"), None],
        "max_epochs": [Interval(Integral, 0, None, closed="left"), None],
        "batch_size": [Interval(Integral, 1, None, closed="left"), Options(Integral, {-1}), StrOptions({"auto"})],
        "train_split": [callable, None],
        "callbacks": [list, None],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "calibration": [StrOptions({"auto", "beta"}), None],
        "calibration_size": [StrOptions({"auto"}), Interval(RealNotInt, 0, 1, closed="neither"),
                             Interval(Integral, 1, None, closed="left")],
        "prototypes": [StrOptions({"auto"}), NotBool(Real, 0, None, closed="left"), None],
        "prototype_candidates": [Interval(Integral, 1, None, closed="left")],
        "flat_term": [StrOptions({"auto"}), NotBool(Real, 0, None, closed="left"), None],
        "path_term": [StrOptions({"auto"}), NotBool(Real, 0, None, closed="left"), None],
        "verbose": ["verbose"],
        "device": [str, torch.device],
        "random_state": ["random_state"],
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }

    #: The label encoder class (the multi-label classifier reads label sets instead).
    _targets = PathTargets

    #: One answer per sample, whose probability ``calibration`` can calibrate.
    _calibrates = True

    #: One answer per sample, which class prototypes can re-rank (``prototypes``).
    _reranks = True

    #: Set by fit (the docstring's Attributes).
    answer_: AnswerModel

    def __init__(
        self,
        tree: Tree | None = None,
        module: type[torch.nn.Module] | None = None,
        partition: str = "auto",
        *,
        stop: bool | None = None,
        semantics: str = "partial",
        training: str = "auto",
        softmax_sample: int | str | None = "auto",
        decoding: str = "best",
        threshold: float = 0.5,
        top_k: int = 5,
        pad_label: Any = None,
        path_sep: str | None = None,
        optimizer: Any = None,
        lr: float | None = None,
        max_epochs: int | None = None,
        batch_size: int | str = "auto",
        train_split: Any = None,
        callbacks: list | None = None,
        early_stopping: bool = False,
        validation_fraction: float = 0.1,
        n_iter_no_change: int = 5,
        tol: float = 1e-4,
        warm_start: bool = False,
        calibration: str | None = "auto",
        calibration_size: str | float | int = "auto",
        prototypes: str | float | None = "auto",
        prototype_candidates: int = 20,
        flat_term: str | float | None = "auto",
        path_term: str | float | None = "auto",
        verbose: int = 0,
        device: str | torch.device = "cpu",
        random_state: Any = None,
        class_weight: dict | str | None = None,
        **kwargs: Any,
    ):
        self.tree = tree
        self.module = module
        self.partition = partition
        self.stop = stop
        self.semantics = semantics
        self.training = training
        self.softmax_sample = softmax_sample
        self.decoding = decoding
        self.threshold = threshold
        self.top_k = top_k
        self.pad_label = pad_label
        self.path_sep = path_sep
        self.optimizer = optimizer
        self.lr = lr
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.train_split = train_split
        self.callbacks = callbacks
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.warm_start = warm_start
        self.calibration = calibration
        self.calibration_size = calibration_size
        self.prototypes = prototypes
        self.prototype_candidates = prototype_candidates
        self.flat_term = flat_term
        self.path_term = path_term
        self.verbose = verbose
        self.device = device
        self.random_state = random_state
        self.class_weight = class_weight
        vars(self).update(kwargs)

    # ------------------------------------------------------------------ fitting
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: Any, y: Any = None, sample_weight: Any = None) -> HierarchicalClassifier:
        """Train the network on labels at any depth of the tree.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor, torch Dataset} of shape (n_samples, n_features)
            Features. Sparse matrices are made dense one mini-batch at a time. A torch
            ``Dataset`` or ``IterableDataset`` yielding ``(x, label)`` pairs is streamed
            (``y`` must then be None and ``tree`` given; see ``docs/scale-out.md``); one
            yielding ``(x, label, weight)`` triples is streamed with those weights.
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            Labels (str or int) at any depth of the tree, or label paths from the top
            level down, right-padded with ``pad_label`` (ragged lists of lists work too).
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each row (``None``: all 1), times its class's
            ``class_weight``. Each mini-batch's loss is the weighted mean
            ``sum(w * loss) / sum(w)`` over its labelled rows: an integer weight counts as that
            many copies of the row, a zero weight as no row. The calibration and the class
            prototypes weigh the rows by it too. Negative, NaN or infinite weights, weights
            of another length, or all zero, are a ``ValueError`` that names them. With
            metadata routing (``sklearn.set_config(enable_metadata_routing=True)``), request
            it with ``set_fit_request(sample_weight=True)`` inside a ``Pipeline`` or a search.

        Returns
        -------
        self : HierarchicalClassifier

        Raises
        ------
        KeyboardInterrupt
            Ctrl-C during the fit: the fit stops and the interrupt propagates (no calibrator
            or prototypes are fitted on the truncated model).
        NonFiniteLossError, DivergedError
            Training diverged (a NaN or infinite loss, or scores).

        Notes
        -----
        A fit that raises, for whatever reason (bad input, a diverging loss, a callback's
        error, Ctrl-C), leaves the estimator as it was before the call: an unfitted one stays
        unfitted, a fitted one keeps its weights, optimizer state, history, prototypes and
        calibrator (the net is copied at the start of a ``warm_start`` fit and put back).
        """
        with keep_fitted_state_on_error(self):  # a failed refit keeps the fitted model
            return run_fit(self, X, y, epochs=None, partial=False, sample_weight=sample_weight)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X: Any, y: Any = None, classes: Any = None,
                    sample_weight: Any = None) -> HierarchicalClassifier:
        """Train for one epoch, continuing from the current weights (if any).

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_levels)
            As in :meth:`fit`; every label must be a class of ``tree_``.
        classes : array-like, default=None
            Used only at the first call and only when ``tree`` is None: the labels (or
            label paths) to learn the tree from, as ``y`` does in :meth:`fit`.
        sample_weight : array-like of shape (n_samples,), default=None
            As in :meth:`fit` (``class_weight="balanced"`` is refused here: a mapping works).

        Returns
        -------
        self : HierarchicalClassifier

        Raises
        ------
        KeyboardInterrupt
            Ctrl-C during the call; the estimator is left as it was before it.

        Warns
        -----
        DivergenceWarning
            The call left the model much worse on the rows it trained on (their mean loss
            more than doubled, and by more than ``log 2`` nats): a learning rate far too high.

        Notes
        -----
        As with :meth:`fit`, a call that raises changes nothing: the weights, optimizer
        state, history and prototypes are put back as they were before it.
        """
        with keep_fitted_state_on_error(self):
            return run_fit(self, X, y, epochs=1, partial=True, classes=classes, sample_weight=sample_weight)

    def grow(self, tree: Tree, X: Any = None, y: Any = None, *, sample_weight: Any = None,
             class_features: Any = None, replay: str | int | None = "auto",
             max_epochs: int | None = None, train: str = "new") -> HierarchicalClassifier:
        """Take a larger tree, new classes below the old ones, and learn them from a few rows.

        The fitted model keeps every weight it has; the new classes' output rows start from
        what is known of them (their rows in ``X``, else their ``class_features`` text, else
        their parent's row), so the model predicts them at once; with rows, it then trains on
        them, replaying a sample of the old classes' stored statistics (their class
        prototypes, one pseudo-row per class) so that it does not forget them
        (``docs/growing.md``).

        Parameters
        ----------
        tree : Tree
            The larger tree: every class of ``tree_`` (matched by label) under the same parent,
            with the same name, and new classes anywhere below (under an old leaf too). Node
            ids may differ.
        X : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_features), default=None
            Rows to learn from: of the new classes, and of old ones too if you have them (they
            join the replay). ``None`` with ``y=None``: no training; the new classes answer
            from their initial rows.
        y : array-like of shape (n_samples,) or (n_samples, n_levels), default=None
            Their labels, classes of the larger tree (as in :meth:`fit`).
        sample_weight : array-like of shape (n_samples,), default=None
            As in :meth:`fit`.
        class_features : scipy sparse matrix of shape (n_classes of tree, n_features), default=None
            Text of the classes of the larger tree, one row per class in its node-id order,
            in the space of ``X`` (``vectorizer.transform(names)``): a new class without rows
            starts from its text's hidden representation, and its prototype holds the text.
            A model fitted with ``module__class_features`` takes these rows as its class text
            (``None``: its own rows, the new classes without text).
        replay : "auto", int or None, default="auto"
            Pseudo-rows of the old classes whose softmax groups the rows' paths touch, drawn
            from their prototypes: ``"auto"`` at most 4 per row of ``X``; an int at most that
            many; ``None`` (or a model without prototypes) none.
        max_epochs : int, default=None
            Passes over the rows and the replay; ``None``: the ``max_epochs`` rule of
            :meth:`fit` for that many rows.
        train : {"new", "all"}, default="new"
            ``"new"``: only the new classes' output rows (and new stop scores) train, with
            the input rows of the features no training row of the fit had (read from the
            class prototypes; the default sparse module only), every other weight frozen: the
            old classes' scores stay exactly as they were on every row made of features the
            fit saw, and a new class takes only rows that look like its own. ``"all"``: the whole network
            continues training (its optimizer's moments carried over), which fits the new
            classes better and moves the old ones: give a sample of old rows in ``X``, ``y``
            beside the replay.

        Returns
        -------
        self : HierarchicalClassifier
            With ``tree_``, ``classes_``, the network and the answer model's class prototypes
            for the larger tree; ``tree`` (when it was given) and ``module__class_features`` (a
            class-text model) set to the larger tree's; the answer model's calibrator and flat
            term dropped, with a
            warning (fitted on the old classes, they would misjudge the new ones); and
            ``grown_``: the new classes, how many output rows started from each source, the
            epochs trained, the unseen features learnt and the pseudo-rows replayed.

        Raises
        ------
        TreeError
            The tree changed a fitted class (missing, under another parent, renamed; the first
            one is named) or adds none.

        Notes
        -----
        A call that raises changes nothing: the fitted model, its parameters and its fitted
        parts stay as they were.

        Examples
        --------
        >>> import numpy as np
        >>> import scipy.sparse as sp
        >>> from hiclass_parallel import Tree
        >>> from hiclass_parallel.estimators import HierarchicalClassifier
        >>> X = sp.csr_matrix(np.eye(3).repeat(20, axis=0))  # sparse rows, as of text
        >>> y = ["cat"] * 20 + ["dog"] * 20 + ["puppy"] * 20
        >>> small = Tree.from_edges([("cat", "animal"), ("dog", "animal")])
        >>> clf = HierarchicalClassifier(small, semantics="terminal", max_epochs=20, random_state=0)
        >>> clf = clf.fit(X[:40], y[:40])  # a dog is an answer, not only a coarse label
        >>> big = Tree.from_edges([("cat", "animal"), ("dog", "animal"), ("puppy", "dog")])
        >>> clf = clf.grow(big, X[40:], y[40:], max_epochs=20)  # rows of the new class only
        >>> clf.grown_["unseen_features"]  # the puppies' feature, which no row of the fit had
        1
        >>> clf.predict(sp.csr_matrix(np.eye(3))).tolist()
        [['animal', 'cat', ''], ['animal', 'dog', ''], ['animal', 'dog', 'puppy']]
        """
        with keep_fitted_state_on_error(self):
            return run_grow(self, tree, X, y, sample_weight=sample_weight, class_features=class_features,
                            replay=replay, max_epochs=max_epochs, train=train)

    # ------------------------------------------------------------------ fitted state
    # Read from the one resolved configuration (``config_``), never kept twice.
    @property
    def n_levels_(self) -> int:
        return self.config_.n_levels

    @property
    def n_scores_(self) -> int:
        return self.config_.n_scores

    @property
    def stop_(self) -> bool:
        return self.config_.stop

    @property
    def partition_(self) -> str:
        return self.config_.partition

    @property
    def training_(self) -> str:
        return self.config_.training

    @property
    def path_local_(self) -> bool:
        return self.config_.path_local

    @property
    def module_class_(self) -> type[torch.nn.Module]:
        return self.config_.module_class

    def _validate_X(self, X: Any, reset: bool) -> Any:
        return validate_X(self, X, reset=reset)

    def _dataset(self, X: Any) -> TreeDataset:
        """Rows of X for prediction, batched as the module takes them."""
        return self.targets_.dataset(X, None, self.config_.capabilities.accepts_sparse)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = False
        tags.target_tags.required = True
        tags.classifier_tags.multi_class = True
        tags.non_deterministic = self.random_state is None
        return tags
