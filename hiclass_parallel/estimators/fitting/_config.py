"""The resolved configuration of a fit: every "auto" and ``None`` decided once, in one place.

:func:`resolve_config` turns the estimator's parameters, the module's capabilities, the tree
and the size of the data into a frozen :class:`FitConfig`, kept as the fitted attribute
``config_``. It is the one place that decides every fit-time choice: the training route
(path-local or full), the step engine (the fused C step or torch, and why), whether the fused
step also applies the optimizer's update, the criterion class and its options (the
level-contrast default), the optimizer class and its options (fused Adam, LazyAdam's groups),
the epochs and the training batch size, the thread count, whether the fused step is planned
ahead, the sampled softmax of wide groups and the linear terms of the re-ranking
(:func:`resolve_linear_terms`, resolved once the fit knows whether it holds rows out for
calibration). Everything downstream (building the net, the net's training step, the decoding
route, persistence) reads it; nothing decides these again. The one data-dependent exception is
named in the configuration's docstring: a batch the fused step cannot take runs through torch
and is counted by the net.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ...losses import DagCrossEntropy, HierarchicalCrossEntropy, PathLocalCrossEntropy
from ...ops.groups import n_outputs
from ...ops.sibling_paths import sibling_plan
from ...tree import Tree
from .._defaults import (BATCH_SIZE, DAG_LEVEL_CONTRAST, LEVEL_CONTRAST, MIN_BATCH_SIZE, MIN_STEPS_PER_EPOCH,
                         SOFTMAX_SAMPLE, TERM_BUDGET, UNIT_ROWS_TOLERANCE)
from ..networks import MLP, EngineRequest, LazyAdam, ModuleCapabilities, SparseMLP, TreeNet, choose, module_capabilities
from . import _costs

__all__ = ["TRAINING", "LEVEL_CONTRAST", "SOFTMAX_SAMPLE", "DAG_LEVEL_CONTRAST", "FitConfig", "MIN_BATCH_SIZE", "MIN_STEPS_PER_EPOCH", "config_changes",
           "LinearTerms", "resolve_batch_size", "resolve_config", "resolve_engines", "resolve_linear_terms", "resolve_lr",
           "resolve_max_epochs", "resolve_module",
           "resolve_plan_ahead", "resolve_softmax_sample", "resolve_threads", "unit_length_rows"]

#: Values of the ``training`` parameter.
TRAINING = ("auto", "path_local", "full")


@dataclass(frozen=True)
class FitConfig:
    """How a model was fitted, with every default resolved.

    Attributes
    ----------
    module_class : type
        The network class.
    capabilities : ModuleCapabilities
        What it can do (read once from the class).
    partition : {"level", "sibling"}
        The softmax groups.
    stop : bool
        Whether there are stop scores.
    training : {"path_local", "full"}
        ``"path_local"``: each sample scores only the groups on its labelled path (and
        prediction decodes best-first); ``"full"``: every score of every sample.
    n_features : int
        Input width.
    n_levels : int
        Depth of the tree: the width of predicted paths.
    n_scores : int
        Scores per sample (classes plus stops).
    lr : float
        Learning rate of the fit.
    max_epochs : int
        Epochs of the fit.
    batch_size : int
        Rows per training batch (``-1``: the whole data set).
    batch_size_reason : str
        Why.
    optimizer : type
        Optimizer class.
    optimizer_options : dict
        The optimizer's options the package sets (without the ``optimizer__`` prefix):
        ``fused=True`` for torch's Adam and AdamW on the CPU and CUDA, LazyAdam's
        ``param_groups`` from the module's capabilities; empty where the user set their own.
    criterion : type
        The criterion class: :class:`~hiclass_parallel.losses.PathLocalCrossEntropy`
        (path-local), :class:`~hiclass_parallel.losses.HierarchicalCrossEntropy` (full), or
        :class:`~hiclass_parallel.losses.DagCrossEntropy` (label sets).
    criterion_options : dict
        Its options besides the tree (without the ``criterion__`` prefix; the user's
        ``criterion__*`` parameters win over them): ``level_contrast`` for path-local training
        (:data:`LEVEL_CONTRAST`, :data:`DAG_LEVEL_CONTRAST`), ``partition`` and ``validate``.
    step_engine : {"fused", "device", "torch"}
        The training engine (:mod:`~hiclass_parallel.estimators.networks.engines`, the first
        of its order of preference that does not refuse the fit: :func:`resolve_engines`):
        ``"device"``, on CUDA with Triton, the default text model's device step
        (:mod:`~hiclass_parallel.estimators.networks.engines.device`: host-planned steps,
        Triton kernels that also apply LazyAdam's update, the losses read back once per epoch);
        else the fused C step of the default text model
        (:mod:`~hiclass_parallel.estimators.networks.engines._fused`), or torch (autograd; full
        training always); dense ``X`` reaches the fused step too, each batch as CSR with every
        column. Under ``"fused"`` a batch the fused step cannot take (neither a sparse CSR batch
        nor a dense float32 one, weights made untrainable, the kernel missing where a saved model continues)
        runs through torch: the documented fallback, counted by the net as ``step_fallbacks_``.
    step_engine_reason : str
        Why the engine is what it is.
    update_engine : {"fused", "device", "optimizer"}
        Whether the fused step also applies LazyAdam's update of the input and output layers
        (``"fused"``), or the optimizer's ``step`` does.
    update_engine_reason : str
        Why.
    threads : int or None
        torch's intra-op threads while training (``None``: torch's own count, left as it is).
    plan_ahead : bool
        Whether each training batch's fused step is planned on a thread of its own while the
        step before it runs (:mod:`~hiclass_parallel.estimators.networks._plan_ahead`): with the
        fused engine, more than one thread and a core left beside them
        (:func:`resolve_plan_ahead`; ``HICLASS_PARALLEL_PLAN_AHEAD`` ``0`` or ``1`` decides).
    plan_ahead_reason : str
        Why.
    softmax_sample : int
        The fused step trains a sibling group wider than this many columns on a sampled
        softmax of this many candidates (``HierarchicalClassifier``'s ``softmax_sample``);
        0: every softmax exact.
    softmax_sample_reason : str
        Why.
    flat_term : float
        The flat linear term's weight before any is learnt (``HierarchicalClassifier``'s
        ``flat_term``: the number given, or 1 for ``"auto"``, which only builds it;
        :mod:`~hiclass_parallel.estimators.answer._flat_margins`); 0: the fit fits none. The
        weight ``predict`` uses is the answer model's (``answer_.weights``).
    flat_term_reason : str
        Why.
    path_term : float
        The path-level linear term's weight before any is learnt (``path_term``, as
        ``flat_term``; :mod:`~hiclass_parallel.estimators.answer._path_margins`); 0: none.
    path_term_reason : str
        Why.
    terms_tried_reason : str
        Which re-ranking terms the answer model tried, each with its estimated cost against the
        budget (:data:`~hiclass_parallel.estimators._defaults.TERM_BUDGET` of the network's
        estimated fit; :func:`resolve_linear_terms`).
    term_weights_reason : str
        How the re-ranking weights were set: learnt on held-out rows
        (:mod:`~hiclass_parallel.estimators.answer`), with per term its weight and held-out
        gain; or why they could not be, and the terms left at ``"auto"`` were not built.
    """

    module_class: type
    capabilities: ModuleCapabilities
    partition: str
    stop: bool
    training: str
    n_features: int
    n_levels: int
    n_scores: int
    lr: float
    max_epochs: int
    optimizer: type
    optimizer_options: dict
    criterion: type
    criterion_options: dict
    step_engine: str
    step_engine_reason: str
    update_engine: str
    update_engine_reason: str
    threads: int | None
    plan_ahead: bool = False
    plan_ahead_reason: str = "not resolved (a configuration saved without it)"
    softmax_sample: int = 0
    softmax_sample_reason: str = "not resolved (a configuration saved without it): every softmax exact"
    batch_size: int = BATCH_SIZE
    batch_size_reason: str = "not resolved (a configuration saved without it): the estimator's batch_size"
    flat_term: float = 0.0
    flat_term_reason: str = "not resolved (a configuration saved without it): no flat term"
    path_term: float = 0.0
    path_term_reason: str = "not resolved (a configuration saved without it): no path term"
    terms_tried_reason: str = "not resolved (a configuration saved without it)"
    term_weights_reason: str = "no weight learnt: every term's weight fixed by its parameter"

    @property
    def path_local(self) -> bool:
        """Whether training (and decoding) is path-local."""
        return self.training == "path_local"

    def fields(self) -> dict[str, Any]:
        """The fields as a dict (capabilities as a nested dict), for saving."""
        out = asdict(self)
        out["module_class"], out["optimizer"], out["criterion"] = self.module_class, self.optimizer, self.criterion
        out["capabilities"] = dict(vars(self.capabilities))
        return out


def resolve_lr(lr: float | None, capabilities: ModuleCapabilities) -> float:
    """``lr``, or the module's default."""
    return float(capabilities.default_lr if lr is None else lr)


def resolve_max_epochs(estimator: Any, capabilities: ModuleCapabilities, n_rows: int | None, batch_size: int) -> int:
    """``max_epochs``, or the module's default for ``n_rows`` training rows in batches of
    ``batch_size``."""
    if estimator.max_epochs is not None:
        return int(estimator.max_epochs)
    return capabilities.default_max_epochs(n_rows, batch_size)


def resolve_batch_size(requested: int | str, capabilities: ModuleCapabilities, n_rows: int | None) -> tuple[int, str]:
    """``(rows per training batch, why)``: an int as it is; ``"auto"``: :data:`BATCH_SIZE`,
    halved for the text model (a module that takes sparse input, whose epochs follow the step
    count) while ``n_rows`` would give an epoch fewer than :data:`MIN_STEPS_PER_EPOCH` steps,
    down to :data:`MIN_BATCH_SIZE`.

    Examples
    --------
    >>> from hiclass_parallel.estimators import SparseMLP
    >>> from hiclass_parallel.estimators.networks import module_capabilities
    >>> text = module_capabilities(SparseMLP)
    >>> [resolve_batch_size("auto", text, n)[0] for n in (150, 400, 940, 1_024, 8_232)]
    [32, 64, 128, 256, 256]
    """
    if not isinstance(requested, str):
        return int(requested), f"batch_size={requested}"
    if n_rows is None or not capabilities.accepts_sparse:
        why = "a stream of unknown length" if n_rows is None else "the default for this module"
        return BATCH_SIZE, f"{why}: {BATCH_SIZE}"
    batch = BATCH_SIZE
    while batch > MIN_BATCH_SIZE and n_rows < MIN_STEPS_PER_EPOCH * batch:
        batch //= 2
    if batch == BATCH_SIZE:
        return batch, f"{n_rows:,} rows give {BATCH_SIZE} rows per batch at least {MIN_STEPS_PER_EPOCH} steps per epoch"
    return batch, (f"a small fit of {n_rows:,} rows: batches of {batch} give an epoch {-(-n_rows // batch)} steps "
                   f"(the text model halves {BATCH_SIZE} down to {MIN_BATCH_SIZE} for at least "
                   f"{MIN_STEPS_PER_EPOCH})")


def resolve_threads(estimator: Any) -> int | None:
    """torch's intra-op threads while the estimator trains (``None``: leave torch's count).

    One thread on the CPU where torch's OpenMP threads would spin: ``OMP_WAIT_POLICY`` unset
    means torch was loaded before the package (importing the package sets ``PASSIVE``
    otherwise), so libgomp's default applies and a thread that finishes a parallel region spins,
    competing with the training step's own threads and with other processes, so on shared cores
    one thread trains faster than two (``docs/gpu.md``, "CPU threads on a shared machine"). Any
    value of the variable is the user's choice and keeps torch's thread count, which already
    counts only the cores the process may run on (and is one inside joblib's workers, which set
    ``OMP_NUM_THREADS`` to cores // n_jobs).
    """
    import os

    import torch

    if os.environ.get("OMP_WAIT_POLICY") or torch.get_num_threads() == 1 or torch.device(estimator.device).type != "cpu":
        return None
    return 1


def resolve_plan_ahead(step_engine: str, threads: int | None, cores: int | None = None) -> tuple[bool, str]:
    """Whether the fused step's planning runs ahead on a thread of its own, and why.

    Only for the fused engine (the torch route plans nothing), and only where a core is left
    beside the step's threads: with more than one thread (a fit given one thread, one joblib
    worker per core say, would run two) and fewer threads than the cores the process may use
    (``cores``; ``None``: counted here). Where the step's threads take every core, the planning
    thread competes with them for the cores instead of using an idle one, and planning ahead
    measured no faster (docs/performance.md, "Planning the next step ahead").
    ``HICLASS_PARALLEL_PLAN_AHEAD=0`` turns it off and ``1`` on with the fused engine (for
    comparisons); unset, it is decided here.
    """
    import os

    import torch

    if step_engine != "fused":
        return False, "the step is not fused"
    forced = os.environ.get("HICLASS_PARALLEL_PLAN_AHEAD", "").strip()
    if forced in ("0", "1"):
        return forced == "1", f"HICLASS_PARALLEL_PLAN_AHEAD={forced}"
    n = torch.get_num_threads() if threads is None else int(threads)
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if n <= 1:
        return False, "one thread: planning ahead would run a second one beside the step"
    if n >= cores:
        return False, (f"the step's {n} threads take all {cores} cores: a planning thread would compete with them "
                       "instead of using an idle core")
    return True, f"{n} threads on {cores} cores: the next batch is planned on a free core while the step runs"


def resolve_criterion(path_local: bool, partition: str, label_sets: bool) -> tuple[type, dict[str, Any]]:
    """The criterion class and its options besides the tree."""
    if label_sets:  # the in-batch level term path-locally, with a label's copies as its positives
        return DagCrossEntropy, ({"partition": "sibling", "level_contrast": DAG_LEVEL_CONTRAST} if path_local
                                 else {"partition": "sibling"})
    if path_local:
        return PathLocalCrossEntropy, {"level_contrast": LEVEL_CONTRAST}
    # Targets were checked when y was encoded; skip the per-batch check (a GPU sync).
    return HierarchicalCrossEntropy, {"partition": partition, "validate": False}


def resolve_optimizer_options(estimator: Any, optimizer: type, capabilities: ModuleCapabilities) -> dict[str, Any]:
    """The optimizer's options the package sets; the user's ``optimizer__*`` settings win."""
    import torch


    given = set(estimator._skorch_kwargs("optimizer__"))
    options: dict[str, Any] = {}
    if (optimizer in (torch.optim.Adam, torch.optim.AdamW) and not {"fused", "foreach"} & given
            and torch.device(estimator.device).type in ("cpu", "cuda")):
        # torch's default Adam steps tensor by tensor; the fused kernel does a step in one
        # pass, which counts on large output layers.
        options["fused"] = True
    groups = capabilities.lazy_adam_groups
    if groups and issubclass(optimizer, LazyAdam) and not {"param_groups", "second_moment", "lr_scale",
                                                            "first_moment"} & given:
        # The module's own groups (a text model's input layer); any group setting of the user's
        # replaces them all, so nothing is merged behind their back.
        options["param_groups"] = [(name, dict(group)) for name, group in groups]
    return options


def resolve_module(estimator: Any, X: Any, label_sets: bool = False) -> tuple[type, str | None]:
    """The network class (the user's, else the default for ``X``), and why a default was
    chosen for a dense ``X`` (``None`` otherwise), which leads ``step_engine_reason``: the
    module decides which engines can train it (:func:`resolve_engines`).

    Sparse X: :class:`SparseMLP`. Dense X whose rows all have length 1 (normalised sentence
    embeddings): :class:`SparseMLP` too, a linear model through the 256-wide layer, which the
    fused C step trains; on such embeddings it was more accurate than the ReLU :class:`MLP`
    and several times faster (``docs/performance.md``). Any other dense X (numeric features,
    unnormalised representations), dense label sets (a criterion the fused step does not
    serve), and ``module__hidden_units`` that only MLP builds (a sequence of layers, or 0):
    :class:`MLP`, whose ReLU layer a linear model cannot replace where classes are not
    linear in ``X`` (``docs/classifier.md``, dense input).
    """
    if estimator.module is not None:
        return estimator.module, None
    if sp.issparse(X):
        return SparseMLP, None
    if not X.shape[0]:  # a stream (its rows come later, dense): MLP, as always
        return MLP, None
    if label_sets:
        return MLP, "dense X with label sets: the ReLU MLP (the fused step does not serve their criterion)"
    hidden = estimator._skorch_kwargs("module__").get("hidden_units", 256)
    if isinstance(hidden, bool) or not isinstance(hidden, (int, np.integer)) or hidden <= 0:
        return MLP, f"dense X with module__hidden_units={hidden!r}, which only MLP takes (several layers, or none)"
    if unit_length_rows(X):
        return SparseMLP, "dense X, every row of length 1 (normalised embeddings): the linear SparseMLP"
    return MLP, ("dense X, rows not all of length 1: the ReLU MLP (normalised embeddings, or module=SparseMLP, "
                 "get the linear model on the fused step)")


def resolve_engines(estimator: Any, module: type, training: str, criterion: type, criterion_options: dict[str, Any],
                    optimizer: type, sparse_input: bool | None) -> tuple[str, str, str, str]:
    """``(step_engine, why, update_engine, why)`` of the training steps: each engine of
    :data:`~hiclass_parallel.estimators.networks.engines.ENGINES` asked once, in its order of
    preference (:func:`~hiclass_parallel.estimators.networks.engines.choose`), about what is
    known before the net is built."""
    request = EngineRequest(
        path_local=training == "path_local", module=module, module_args=estimator._skorch_kwargs("module__"),
        criterion=criterion, criterion_args={**criterion_options, **estimator._skorch_kwargs("criterion__")},
        optimizer=optimizer, device=estimator.device, sparse_input=sparse_input, callbacks=estimator.callbacks,
        net_class=TreeNet,
    )
    return choose(request).as_tuple()


def resolve_softmax_sample(requested: int | str | None, step_engine: str, tree: Tree, stop: bool) -> tuple[int, str]:
    """``(limit, why)`` of the sampled softmax of wide groups: the groups wider than ``limit``
    columns train on that many sampled candidates; 0: every softmax exact."""
    if requested is None:
        return 0, "softmax_sample=None: every softmax exact"
    if step_engine not in ("fused", "device"):
        return 0, f"the {step_engine} step is exact (the sampled softmax is the fused and device steps')"

    limit = SOFTMAX_SAMPLE if requested == "auto" else int(requested)
    widths = np.diff(sibling_plan(tree, stop).group_ptr)
    widest = int(widths.max()) if widths.size else 0
    source = "the default" if requested == "auto" else "softmax_sample"
    if widest <= limit:
        return 0, (f"no sibling group is wider than {limit:,} columns ({source}; the widest has {widest:,}): "
                   "every softmax exact")
    wide = int((widths > limit).sum())
    return limit, (f"{wide:,} sibling group{'s' * (wide != 1)} wider than {limit:,} columns ({source}; the widest has "
                   f"{widest:,}) {'train' if wide != 1 else 'trains'} on {limit:,} sampled candidates per batch")



def unit_length_rows(X: Any) -> bool:
    """Whether every row of a dense ``X`` (NumPy or torch) has length 1: embeddings normalised
    for cosine similarity, as sentence encoders give them. ``False`` for an empty ``X``."""
    import torch

    if isinstance(X, torch.Tensor):
        if X.ndim != 2 or not X.shape[0]:
            return False
        squares = torch.linalg.vector_norm(X.detach().float(), dim=1) ** 2
        return bool(((squares - 1).abs() <= UNIT_ROWS_TOLERANCE).all())
    X = np.asarray(X)
    if X.ndim != 2 or not X.shape[0] or not np.issubdtype(X.dtype, np.floating):
        return False
    squares = np.einsum("ij,ij->i", X, X)
    return bool((np.abs(squares - 1) <= UNIT_ROWS_TOLERANCE).all())


@dataclass(frozen=True)
class LinearTerms:
    """What :func:`resolve_linear_terms` decided for the answer model's linear terms.

    Attributes
    ----------
    flat_term : float
        The flat term's weight before any is learnt (0: none; 1 for ``"auto"``, which only
        builds it).
    flat_term_reason : str
        Why.
    on_candidates : bool
        Whether the flat term's SVM is the SVM of the candidates
        (:meth:`~hiclass_parallel.estimators.FlatMargins.fit_on_candidates`), fitted once the
        network has trained, not the SVM against every row.
    path_term : float
        The path-level term's weight before any is learnt (0: none).
    path_term_reason : str
        Why.
    path_solver : {"least_squares", "svm"}
        How its SVMs are solved (:meth:`~hiclass_parallel.estimators.answer.PathMargins.fit`):
        the cheaper route by the estimates.
    terms_tried_reason : str
        Which terms the answer model tries, each with its estimated cost against the budget.
    """

    flat_term: float
    flat_term_reason: str
    on_candidates: bool
    path_term: float
    path_term_reason: str
    path_solver: str
    terms_tried_reason: str


def resolve_linear_terms(estimator: Any, tree: Tree, ids: np.ndarray | None, X: Any, partial: bool,
                         data_parallel: bool, sample_weight: np.ndarray | None = None, *,
                         config: FitConfig) -> LinearTerms:
    """The linear terms of the re-ranking (the flat term, the path-level term) and the record
    of which terms the answer model tries (``config_.terms_tried_reason``), each with its
    estimated cost against the budget.

    The terms share one budget: :data:`~hiclass_parallel.estimators._defaults.TERM_BUDGET` of
    the network's estimated fit under ``config`` (:mod:`._costs`), for the sum of their
    estimated costs. The flat term is tried first, where its cost is within the budget: on
    sparse rows the SVM against every row where it is, else the SVM of the candidates where
    that is; on dense rows of unit length the least-squares SVM. The path-level term is tried
    where its cost is within what the flat term leaves of the budget. ``None`` never keeps a
    term; a number keeps one of that weight wherever it can be fitted
    (:func:`_linear_term_refusal`; elsewhere a named error), its cost counted against the
    budget all the same (the flat term's SVM against every row over the budget only where
    the SVM of the candidates is over it too); ``"auto"`` keeps one within the budget, its
    weight learnt on held-out rows (:mod:`~..answer._held_out`; the weight returned here, 1,
    only builds it). ``ids`` are the training rows' node ids (``None``: a stream's, unread),
    ``X`` the rows (``None``: streamed), ``partial`` whether this is ``partial_fit`` (one
    call's rows), ``data_parallel`` whether each rank holds a shard, ``sample_weight`` the
    rows' weights (the SVMs' too): a target only rows of weight 0 name is no training target.
    """
    counted = None if ids is None else (ids >= 0) & (True if sample_weight is None else sample_weight > 0)
    if X is None or ids is None or not type(estimator)._reranks:
        tried = "no term is tried: " + ("label sets have no single answer to re-rank" if not type(estimator)._reranks
                                        else "a streamed data set passes once (arrays keep the terms)")
        network = None
    else:
        hidden = _costs.hidden_width(estimator, config.module_class)
        columns = _costs.mean_path_columns(tree, np.where(counted, ids, -1), config.stop, config.softmax_sample)
        network = _costs.network_cost(X, columns, config.max_epochs, hidden)
        tried = (f"budget {TERM_BUDGET:g} x the network's estimated fit ({network:.3g} multiply-adds) for the "
                 f"linear terms together; prototypes: {_share(_costs.prototypes_cost(X), network)} (one pass over "
                 "the rows), " + ("tried" if getattr(estimator, "prototypes", None) is not None else "prototypes=None"))
    # Rows of weight 0 teach the SVMs nothing: they name no target and count as no row.
    targets = None if X is None or ids is None else np.unique(ids[counted])
    refusal = _linear_term_refusal(estimator, tree, targets, partial, data_parallel)
    left = None if network is None else TERM_BUDGET * network
    flat, flat_why, on_candidates, flat_tried, spent = _flat_term(estimator, X, targets, refusal, network, left,
                                                                 None if network is None else (columns, hidden))
    left = None if left is None else left - spent
    path, path_why, solver, path_tried = _path_term(estimator, tree, X,
                                                    np.where(counted, ids, -1) if ids is not None else None,
                                                    refusal, network, left)
    return LinearTerms(flat, flat_why, on_candidates, path, path_why, solver,
                       f"{tried}; flat_term: {flat_tried}; path_term: {path_tried}")


def _flat_term(estimator: Any, X: Any, targets: np.ndarray | None, refusal: str | None, network: float | None,
               budget: float | None, shape: tuple[float, int] | None) -> tuple[float, str, bool, str, float]:
    """``(weight, why, on_candidates, tried, cost)`` of the flat term (``cost``: its estimate,
    0 where none is fitted; ``shape``: the mean path columns and the hidden width)."""
    requested = getattr(estimator, "flat_term", None)
    unfitted = _unfitted("flat_term", requested, refusal)
    if unfitted is not None:
        return 0.0, unfitted[0], False, unfitted[1], 0.0
    if sp.issparse(X):
        every = _costs.flat_svm_cost(X, targets.size)
        candidates = _costs.candidates_svm_cost(X, targets.size, estimator.prototype_candidates, *shape)
        costs = (f"the SVM against every row {_share(every, network)}, the SVM of the candidates "
                 f"{_share(candidates, network)}")
        on_candidates = every > budget and (candidates <= budget or not isinstance(requested, str))
        within = every <= budget or candidates <= budget
        route = "the SVM of the candidates" if on_candidates else "a flat linear SVM against every row"
        cost = candidates if on_candidates else every
    else:
        every = cost = _costs.least_squares_cost(X, targets.size)
        costs = f"the least-squares SVM {_share(every, network)}"
        on_candidates, within, route = False, every <= budget, "a flat least-squares SVM"
    if not isinstance(requested, str):
        why = f"flat_term={float(requested)!r}: {route} ({costs})"
        return float(requested), why, on_candidates, f"{costs}: {route}, fixed weight", cost
    off = _auto_off(estimator, X, within, costs)
    if off is not None:
        return 0.0, off, False, f"not tried: {off}", 0.0
    why = f"{route} ({costs}, within the budget of {TERM_BUDGET:g}): its weight is learnt on held-out rows"
    return 1.0, why, on_candidates, f"{costs}: {route} tried", cost


def _path_term(estimator: Any, tree: Tree, X: Any, ids: np.ndarray | None, refusal: str | None,
               network: float | None, left: float | None) -> tuple[float, str, str, str]:
    """``(weight, why, solver, tried)`` of the path-level term, within what the flat term
    ``left`` of the budget (``ids``: the training rows' node ids, ``-1`` for rows that count as
    none; ``solver``: :func:`~._costs.path_term_cost`'s cheaper route)."""
    requested = getattr(estimator, "path_term", None)
    unfitted = _unfitted("path_term", requested, refusal)
    if unfitted is not None:
        return 0.0, unfitted[0], "svm", unfitted[1]
    cost, solver = _costs.path_term_cost(X, _costs.level_classes(tree, ids))
    route = "a path-level least-squares SVM" if solver == "least_squares" else "a path-level linear SVM a level"
    costs = f"{route} {_share(cost, network)}, {_share(max(left, 0.0), network)} of the budget left"
    if not isinstance(requested, str):
        return float(requested), f"path_term={float(requested)!r}: {costs}", solver, f"{costs}, fixed weight"
    off = _auto_off(estimator, X, cost <= left, costs)
    if off is not None:
        return 0.0, off, solver, f"not tried: {off}"
    return 1.0, f"{costs}: its weight is learnt on held-out rows", solver, f"{costs}: tried"


def _unfitted(name: str, requested: Any, refusal: str | None) -> tuple[str, str] | None:
    """``(why, tried)`` where the linear term ``name`` is not fitted whatever it costs
    (``None``: its cost decides): the parameter ``None``, or a ``refusal``, which for a weight
    given as a number is a named error."""
    if requested is None:
        return f"{name}=None", f"{name}=None"
    if refusal is None:
        return None
    if not isinstance(requested, str):
        raise ValueError(f"{name}={requested!r} cannot be fitted here: {refusal}. Use {name}='auto' or None")
    return refusal, f"not tried: {refusal}"


def _auto_off(estimator: Any, X: Any, within: bool, costs: str) -> str | None:
    """Why ``"auto"`` leaves a linear term off (``None``: it is tried): the rows'
    (:func:`_linear_term_auto_off`), else its estimated ``costs`` over the budget."""
    off = _linear_term_auto_off(estimator, X)
    if off is None and not within:
        off = f"{costs}: over the budget"
    return off


def _share(cost: float, network: float) -> str:
    """A cost as a share of the network's: ``"0.05x"``."""
    return f"{cost / network:.2g}x" if network else "unknown"


def _linear_term_refusal(estimator: Any, tree: Tree, targets: np.ndarray | None, partial: bool,
                         data_parallel: bool) -> str | None:
    """Why no linear term (flat or path-level) can be fitted here (``None``: it can);
    ``targets``: the distinct training targets (``None``: a stream's, unknown)."""
    if not type(estimator)._reranks:
        return "label sets have no single answer to re-rank"
    if partial:
        return "partial_fit sees one call's rows (fit keeps the term)"
    if targets is None:
        return "a streamed data set passes once (arrays keep the term)"
    if data_parallel:
        return "a data-parallel fit holds a shard of the rows on each rank"
    if targets.size < 2:
        return f"{targets.size} distinct training target{'s' * (targets.size != 1)} (a linear SVM needs two)"
    if estimator.semantics == "partial" and not np.asarray(tree.is_leaf)[targets].all():
        return "semantics='partial' answers with leaves, and some training targets are internal nodes"
    return None


def _linear_term_auto_off(estimator: Any, X: Any) -> str | None:
    """Why ``"auto"`` leaves a linear term that could be fitted off whatever it costs
    (``None``: the budget decides)."""
    if estimator._skorch_kwargs("module__").get("class_features") is not None:
        return ("module__class_features names classes no training row has, which the flat SVM, knowing only the "
                "training targets, would vote against")
    if not sp.issparse(X) and not unit_length_rows(X):
        return ("dense X with rows not all of length 1: the term was measured to help on sparse text and normalised "
                "embeddings, and to hurt where classes are not linear in X (set a weight to use it)")
    return None


def resolve_partition(requested: str, capabilities: ModuleCapabilities, forced: str | None = None) -> str:
    """``"auto"``: the sibling partition for modules that score columns on demand (both default
    modules, MLP and SparseMLP: each row then pays only for the groups on its path), else the
    paper's level partition."""
    if forced is not None:
        return forced
    if requested != "auto":
        return requested
    return "sibling" if capabilities.scores_columns else "level"


def resolve_stop(estimator: Any) -> bool:
    """``stop``, or ``None`` resolved: stop scores exactly under terminal semantics."""
    return (estimator.semantics == "terminal") if estimator.stop is None else bool(estimator.stop)


def resolve_training(requested: str, partition: str, module: type, capabilities: ModuleCapabilities) -> str:
    """The training route: the one place it is decided."""
    possible = partition == "sibling" and capabilities.scores_columns
    if requested == "auto":
        return "path_local" if possible else "full"
    if requested == "path_local" and not possible:
        why = (
            f"partition={partition!r} (path-local training needs the sibling partition)" if partition != "sibling"
            else f"the module {module.__qualname__} cannot score columns on demand (it needs encode(X) and "
            "scorer(hidden) methods, as MLP and SparseMLP have)"
        )
        raise ValueError(f"training='path_local' is not possible here: {why}. Use training='auto' or 'full'")
    return requested


def resolve_config(
    estimator: Any, module: type, tree: Tree, n_features: int, n_rows: int | None, forced_partition: str | None = None,
    label_sets: bool = False, sparse_input: bool | None = None, module_reason: str | None = None,
) -> FitConfig:
    """The :class:`FitConfig` of a new fit.

    Parameters
    ----------
    estimator : HierarchicalClassifier
        Its parameters (``partition``, ``stop``, ``semantics``, ``training``, ``lr``,
        ``max_epochs``, ``optimizer``, ``batch_size``).
    module : type
        The network class (the user's, or the default for ``X``).
    tree : Tree
        The class tree (for a DAG, its unrolled tree).
    n_features : int
        Input width.
    n_rows : int or None
        Training rows (``None``: a stream without a length).
    forced_partition : str, default=None
        A partition the label encoder requires (label sets: ``"sibling"``).
    label_sets : bool, default=False
        The targets are label sets (the multi-label classifier's criterion).
    sparse_input : bool or None, default=None
        Whether ``X`` is sparse (``None``: a stream, unknown until its batches come).
    module_reason : str, default=None
        Why ``module`` is the default for this ``X``, where the data chose it (dense ``X``:
        :func:`resolve_module`); it leads ``step_engine_reason``.
    """
    capabilities = module_capabilities(module)
    partition = resolve_partition(estimator.partition, capabilities, forced_partition)
    stop = resolve_stop(estimator)
    training = resolve_training(estimator.training, partition, module, capabilities)
    optimizer = estimator.optimizer if estimator.optimizer is not None else capabilities.default_optimizer
    batch_size, batch_size_why = resolve_batch_size(estimator.batch_size, capabilities, n_rows)
    criterion, criterion_options = resolve_criterion(training == "path_local", partition, label_sets)
    step_engine, step_why, update_engine, update_why = resolve_engines(
        estimator, module, training, criterion, criterion_options, optimizer, sparse_input)
    if module_reason:
        step_why = f"{module_reason}; {step_why}"
    threads = resolve_threads(estimator)
    plan_ahead, plan_ahead_why = resolve_plan_ahead(step_engine, threads)
    softmax_sample, softmax_sample_why = resolve_softmax_sample(getattr(estimator, "softmax_sample", "auto"),
                                                                step_engine, tree, stop)
    return FitConfig(
        module_class=module,
        capabilities=capabilities,
        partition=partition,
        stop=stop,
        training=training,
        n_features=int(n_features),
        n_levels=int(tree.n_levels),
        n_scores=int(n_outputs(tree, partition=partition, stop=stop)),
        lr=resolve_lr(estimator.lr, capabilities),
        max_epochs=resolve_max_epochs(estimator, capabilities, n_rows, batch_size),
        batch_size=batch_size,
        batch_size_reason=batch_size_why,
        optimizer=optimizer,
        optimizer_options=resolve_optimizer_options(estimator, optimizer, capabilities),
        criterion=criterion,
        criterion_options=criterion_options,
        step_engine=step_engine,
        step_engine_reason=step_why,
        update_engine=update_engine,
        update_engine_reason=update_why,
        threads=threads,
        plan_ahead=plan_ahead,
        plan_ahead_reason=plan_ahead_why,
        softmax_sample=softmax_sample,
        softmax_sample_reason=softmax_sample_why,
    )


def config_changes(
    estimator: Any, config: FitConfig, tree_now: Any, tree_then: Any, forced_partition: str | None = None
) -> list[str]:
    """The settings that changed since ``config`` was resolved and that continuing cannot apply."""
    partition = resolve_partition(estimator.partition, config.capabilities, forced_partition)
    stop = resolve_stop(estimator)
    training = config.training if estimator.training == "auto" else estimator.training
    changed = [name for name, now, then in (
        ("partition", partition, config.partition), ("stop", stop, config.stop), ("training", training, config.training),
    ) if now != then]
    if not (tree_now is tree_then or tree_now == tree_then):
        changed.append("tree")
    return changed
