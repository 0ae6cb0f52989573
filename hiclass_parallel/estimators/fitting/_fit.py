"""The one fit pipeline: prepare -> build -> train, for arrays and torch datasets alike.

``fit``, ``partial_fit`` and ``fit`` on a torch ``Dataset`` all run :func:`run_fit`. The data
differ only by an adapter (:class:`ArrayInput` for arrays, sparse matrices and tensors;
:class:`~._streaming.StreamInput` for datasets) that validates ``X``, says how many rows and
features there are and gives the dataset the net iterates. The rest is shared:

1. **prepare**: the label encoder (``targets_``) is fitted, the configuration (``config_``)
   resolved once (:func:`~._config.resolve_config`);
2. **build**: the skorch net from that configuration (:func:`~._build.build_net`);
3. **train**: seeded, skorch's own ``partial_fit`` loop (history, callbacks, validation split,
   early stopping), and a check that the trained model scores finitely.

Continuing (``partial_fit``, ``warm_start``) skips 1 and 2 after checking that nothing it
would decide differently has changed, and hands the fitted net the parameters changed since it
was built that it can take (:func:`~._params.changed_since_built`; the others get a warning).

A call that raises (bad input, a diverging loss, a callback's error, Ctrl-C) changes nothing: a
fresh fit builds a new net, calibrator and prototypes and sets them at the end; a continued one
trains the fitted net in place under :func:`~._guards.keep_net_on_error` and adds the call's
rows to a copy of the prototypes, set only once training succeeded. A continued call that
leaves the model much worse on its own rows warns (:func:`~._guards.warn_if_worse`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted
from torch.utils.data import Subset

from .._checks import validate_X
from ..answer import added_prototypes, is_sparse, plan_calibration
from ..networks import FitRandom, data_parallel_group, drawing_from, draws_from_fit_generator
from ._answer_fit import drop_stale, fit_linear_terms, fit_on_held_out, fitted_answer, learn_by_cross_fitting
from ._build import build_net, net_params
from ._config import (
    config_changes,
    resolve_batch_size,
    resolve_config,
    resolve_linear_terms,
    resolve_lr,
    resolve_max_epochs,
    resolve_module,
    resolve_threads,
)
from ._guards import check_trained_scores, fitted_attributes, keep_net_on_error, mean_loss, warn_if_worse
from ._params import LOADER_PREFIXES, attach_net, changed_since_built, mark_applied
from ._streaming import StreamInput, is_dataset
from ._validation import check_params, warn_if_scales_differ, warn_ignored_changes
from ._targets import check_fit_sample_weight, item_weights

__all__ = ["ArrayInput", "run_fit", "seeded", "training_threads"]


class ArrayInput:
    """Arrays, sparse matrices and tensors: ``X`` validated, ``y`` encoded up front, the rows'
    ``sample_weight`` checked and, with ``class_weight``, turned into one weight per training
    item (:mod:`._targets`)."""

    def __init__(self, X: Any, y: Any, sample_weight: Any = None, class_weight: Any = None):
        self.X, self.y = X, y
        self.sample_weight, self.class_weight = sample_weight, class_weight
        self.n_rows: int | None = None

    def validate(self, estimator: Any, reset: bool) -> None:
        self.X = validate_X(estimator, self.X, reset=reset)
        self.n_rows = int(self.X.shape[0])
        self.sample_weight = check_fit_sample_weight(self.sample_weight, self.n_rows)

    def fit_targets(self, targets: Any, classes: Any) -> None:
        targets.fit(self.y, classes)

    def dataset(self, targets: Any, sparse: bool, advise_semantics: str | None = None) -> Any:
        ids = targets.encode(self.X, self.y)
        if advise_semantics is not None:
            targets.advise(ids, advise_semantics)
        dataset = targets.dataset(self.X, ids, sparse)
        hierarchy = getattr(targets, "hierarchy", targets.tree)  # the classes' labels are its labels
        dataset.weight = item_weights(self.sample_weight, self.class_weight, hierarchy, ids)
        return dataset

    def loading(self, net: Any, targets: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


@contextlib.contextmanager
def training_threads(estimator: Any, threads: int | None | str = "resolve") -> Iterator[None]:
    """torch's intra-op threads while the estimator trains, put back after: ``threads`` (the
    configuration's; ``None``: torch's own count), or ``"resolve"``:
    :func:`~._config.resolve_threads` now (a continued fit, on the machine it runs on)."""
    if threads == "resolve":
        threads = resolve_threads(estimator)
    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def seeded(estimator: Any, seed: int | None, module: Any = None) -> Iterator[None]:
    """The fit's random numbers inside: with ``random_state`` set, a private generator
    (:class:`~..networks._random.FitRandom`) that the default modules' initial weights, the
    training loader's shuffling, dropout and the sampled softmax draw from; torch's global
    generator is not touched, so fits in several threads are each reproducible and leave the
    other threads' streams alone.

    ``seed`` starts a fresh stream (fit); ``None`` resumes the stream where the last fit or
    partial_fit left it, so a sequence of partial fits is reproducible too. ``module``: the
    module class (``None``: the fitted net's). A module class that does not draw from the
    fit's generator (the user's own: its layers initialise and drop out through torch's
    global generator) gets the global generator seeded inside and put back after, under a
    lock that keeps such fits in several threads from drawing from one another's stream (the
    other threads' own draws from it are not protected).
    """
    if estimator.random_state is None:
        yield
        return
    if seed is None and not hasattr(estimator, "_rng_state_"):  # fitted unseeded, seeded since
        seed = _draw_seed(estimator)
    if module is None:
        module = type(getattr(getattr(estimator, "net_", None), "module_", None))
    if not draws_from_fit_generator(module):
        with _GLOBAL_RNG_LOCK, _seeded_globally(estimator, seed):
            yield
        return
    state = getattr(estimator, "_rng_state_", None) if seed is None else None
    random = FitRandom(seed=seed, state=state, device=estimator.device)
    with drawing_from(random):
        yield
    estimator._rng_state_ = random.state()


#: Held while a fit of a module class of the user's draws from torch's global generator.
_GLOBAL_RNG_LOCK = threading.RLock()


@contextlib.contextmanager
def _seeded_globally(estimator: Any, seed: int | None) -> Iterator[None]:
    """torch's global generator seeded inside (``seed``, or resumed from ``_rng_state_``), the
    caller's state restored outside: for module classes that draw from it."""
    device = torch.device(estimator.device)
    cuda = device.type == "cuda" and torch.cuda.is_available()
    with torch.random.fork_rng(devices=[device.index or 0] if cuda else []):
        if seed is not None:
            torch.default_generator.manual_seed(seed)
            if cuda:
                torch.cuda.manual_seed(seed)
        else:
            torch.set_rng_state(estimator._rng_state_[0])
            if cuda and estimator._rng_state_[1] is not None:
                torch.cuda.set_rng_state(estimator._rng_state_[1])
        yield
        estimator._rng_state_ = (torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None)


def _draw_seed(estimator: Any) -> int | None:
    if estimator.random_state is None:
        return None
    return int(check_random_state(estimator.random_state).randint(np.iinfo(np.int32).max))


def _fit_new(estimator: Any, data: Any, epochs: int | None, classes: Any) -> Any:
    for attr in fitted_attributes(estimator):  # what keep_fitted_state_on_error puts back
        delattr(estimator, attr)
    data.validate(estimator, reset=True)
    if isinstance(data, ArrayInput):
        warn_if_scales_differ(estimator, data.X)
    targets = type(estimator)._targets(estimator.tree, estimator.pad_label, type(estimator).__name__,
                                       sep=getattr(estimator, "path_sep", None))
    data.fit_targets(targets, classes)
    module, module_reason = resolve_module(estimator, data.X, targets.label_sets)
    config = resolve_config(estimator, module, targets.tree, estimator.n_features_in_,
                            data.n_rows, targets.forced_partition, label_sets=targets.label_sets,
                            sparse_input=_sparse_input(data), module_reason=module_reason)
    dataset = data.dataset(targets, config.capabilities.accepts_sparse, advise_semantics=estimator.semantics)
    seed = _draw_seed(estimator)
    net = build_net(estimator, config, targets, seed)
    plan = plan_calibration(estimator, data.n_rows, config.max_epochs, epochs, not isinstance(data, ArrayInput), seed,
                            sparse_module=config.capabilities.accepts_sparse, sample_weight=_row_weights(data))
    # a stream's labels come with its batches; label sets are no node ids
    ids = np.asarray(dataset.y) if isinstance(data, ArrayInput) and type(estimator)._reranks else None
    linear = resolve_linear_terms(
        estimator, targets.tree, ids, _rows_of(data), partial=epochs is not None,
        data_parallel=data_parallel_group(estimator) is not None, sample_weight=_row_weights(data), config=config)
    config = dataclasses.replace(config, flat_term=linear.flat_term, flat_term_reason=linear.flat_term_reason,
                                 path_term=linear.path_term, path_term_reason=linear.path_term_reason,
                                 terms_tried_reason=linear.terms_tried_reason)
    held_out, terms = None, {}
    with training_threads(estimator, config.threads), data.loading(net, targets):
        with seeded(estimator, seed, module=config.module_class):
            net.initialize()
            if plan is None:
                net.partial_fit(dataset, None, epochs=epochs)
                terms = fit_linear_terms(estimator, net, targets, config, _rows_of(data), ids, _row_weights(data),
                                         None, linear.on_candidates, seed, linear.path_solver)
            else:
                # Without the held-out rows; with enough epochs they join the last one, after the
                # map is fitted (_calibration's docstring says when and why).
                held_out_epochs = config.max_epochs - 1 if plan.rejoin else config.max_epochs
                net.partial_fit(Subset(dataset, plan.fit_rows), None, epochs=held_out_epochs)
                terms = fit_linear_terms(estimator, net, targets, config, data.X, ids, _row_weights(data), plan,
                                         linear.on_candidates, seed, linear.path_solver)
                held_out, config = fit_on_held_out(estimator, net, targets, config, data.X, dataset.y, plan,
                                                   _row_weights(data), linear=terms)
                if plan.rejoin:
                    net.partial_fit(dataset, None, epochs=1)
        check_trained_scores(net, dataset)
    answer = fitted_answer(estimator, targets, config, _rows_of(data), dataset, _row_weights(data), terms, held_out)
    if plan is None and ids is not None:  # weights left at "auto" on a fit that held no rows out
        config, answer = learn_by_cross_fitting(estimator, data.X, data.y, ids, _row_weights(data), targets, config,
                                                answer, seed, partial=epochs is not None)
    vars(estimator).update(targets.fitted_attributes(), targets_=targets, config_=config, answer_=answer)
    attach_net(estimator, net)
    return estimator


def _sparse_input(data: Any) -> bool | None:
    """Whether the rows are sparse (a scipy sparse matrix or a sparse torch tensor:
    :func:`~..answer.is_sparse`); ``None`` for a stream, whose batches only the net sees."""
    if not isinstance(data, ArrayInput):
        return None
    return is_sparse(data.X)


def _row_weights(data: Any) -> np.ndarray | None:
    """The rows' ``sample_weight`` of in-memory input (``None``: unweighted, or a stream). The
    class prototypes and the answer calibrator weigh rows by it; ``class_weight`` is the loss's
    (it re-balances training, not the estimate of how often an answer is right)."""
    return getattr(data, "sample_weight", None) if isinstance(data, ArrayInput) else None


def _rows_of(data: Any) -> Any:
    """The training rows of in-memory input; ``None`` for a stream (its rows pass once, and
    the prototypes are not built from them)."""
    return data.X if isinstance(data, ArrayInput) else None


def _continue(estimator: Any, data: Any, epochs: int | None) -> Any:
    check_is_fitted(estimator)
    config, targets = estimator.config_, estimator.targets_
    tree_now = estimator.tree if estimator.tree is not None else targets.source
    changed = config_changes(estimator, config, tree_now, targets.source, targets.forced_partition)
    if changed:
        raise ValueError(
            f"cannot continue training: {', '.join(changed)} changed since the model was fitted; "
            "fit afresh with warm_start=False"
        )
    live, ignored = changed_since_built(estimator)
    warn_ignored_changes(ignored)
    data.validate(estimator, reset=False)
    dataset = data.dataset(targets, config.capabilities.accepts_sparse)
    net = estimator.net_
    X = _rows_of(data)
    # A copy with the call's rows added, set only once training succeeded.
    answer = estimator.answer_
    prototypes = added_prototypes(estimator, targets, answer.term("prototypes"), X, dataset, _row_weights(data))
    # The net trains in place: a failed call (an error, a callback's, Ctrl-C) puts it back as it
    # was, up to the last line (keep_fitted_state_on_error puts back the attributes set here).
    with keep_net_on_error(net):
        _hand_over(estimator, net, config, data.n_rows, live)
        with training_threads(estimator), data.loading(net, targets):
            before = mean_loss(net, dataset)
            with seeded(estimator, None):
                net.partial_fit(dataset, None, epochs=epochs)
            check_trained_scores(net, dataset)
            after = None if before is None else mean_loss(net, dataset)
        if prototypes is not None:
            answer = answer.replace(terms={**answer.terms, "prototypes": prototypes})
        estimator.answer_, estimator.config_ = drop_stale(estimator, answer)
        warn_if_worse(before, after, getattr(net, "lr", None))
    return estimator


def _hand_over(estimator: Any, net: Any, config: Any, n_rows: int | None, names: list[str]) -> None:
    """Give the fitted net the parameters ``names`` (changed since it was built) through skorch.

    skorch's ``set_params`` sets ``lr`` and ``optimizer__*`` on the optimizer, re-initialises
    the criterion (and the optimizer) for ``criterion__*`` and the callbacks for
    ``callbacks__*``. The loaders' ``iterator_*`` parameters are set as the attributes skorch
    sets on a net not yet initialised: on an initialised one its ``set_params`` refuses them
    (nothing to re-initialise), and its loaders read them at every fit. ``max_epochs`` is
    resolved again for this data (``None``: the module's default for ``n_rows`` rows).
    """
    from dataclasses import replace


    batch_size = config.batch_size if "batch_size" not in names else resolve_batch_size(
        estimator.batch_size, config.capabilities, n_rows)[0]
    now = replace(config, lr=resolve_lr(estimator.lr, config.capabilities), batch_size=batch_size,
                  max_epochs=resolve_max_epochs(estimator, config.capabilities, n_rows, batch_size))
    values = net_params(estimator, now)
    params = {**{name: values[name] for name in names}, "max_epochs": now.max_epochs}
    vars(net).update({k: params.pop(k) for k in list(params) if k.startswith(LOADER_PREFIXES)})
    net.set_params(**params)
    mark_applied(estimator, names)


def run_fit(estimator: Any, X: Any, y: Any, *, epochs: int | None, partial: bool, classes: Any = None,
            sample_weight: Any = None) -> Any:
    """``fit`` (``partial=False``) or ``partial_fit`` (``partial=True``: one epoch, continuing).

    Parameters
    ----------
    estimator : HierarchicalClassifier
    X : array-like, sparse matrix, torch.Tensor or torch Dataset
    y : array-like or None
    epochs : int or None
        ``None``: the configuration's ``max_epochs``.
    partial : bool
        Continue the fitted network if there is one (``partial_fit``); otherwise ``fit``
        continues only with ``warm_start``.
    classes : array-like, default=None
        ``partial_fit``'s ``classes`` at the first call.
    sample_weight : array-like of shape (n_samples,), default=None
        The rows' weights (:mod:`._targets`); a streamed data set yields its own.
    """
    check_params(estimator)
    class_weight = getattr(estimator, "class_weight", None)
    if partial and isinstance(class_weight, str):
        raise ValueError(
            "class_weight='balanced' is not available in partial_fit: one call's rows do not tell the classes' "
            "frequencies. Pass the weights as a mapping label -> weight (counted on a large enough sample of the "
            "training labels), or use fit"
        )
    targets_class = type(estimator)._targets
    if is_dataset(X):
        data = StreamInput(X, y, estimator, targets_class, sample_weight=sample_weight)
    else:
        data = ArrayInput(X, y, sample_weight, class_weight)
    if hasattr(estimator, "net_") and (partial or estimator.warm_start):
        return _continue(estimator, data, epochs)
    return _fit_new(estimator, data, epochs, classes)
