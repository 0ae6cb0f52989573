"""The resolved configuration of a fit: every "auto" and ``None`` decided once, in one place.

:func:`resolve_config` turns the estimator's parameters, the module's capabilities, the tree
and the size of the data into a frozen :class:`FitConfig`, kept as the fitted attribute
``config_``. Everything downstream (building the net, the training route, the decoding route,
persistence) reads it; nothing decides these again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...tree import Tree
from ._capabilities import ModuleCapabilities, module_capabilities

__all__ = ["TRAINING", "FitConfig", "config_changes", "resolve_config", "resolve_lr", "resolve_max_epochs"]

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
    optimizer : type
        Optimizer class.
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

    @property
    def path_local(self) -> bool:
        """Whether training (and decoding) is path-local."""
        return self.training == "path_local"

    def fields(self) -> dict[str, Any]:
        """The fields as a dict (capabilities as a nested dict), for saving."""
        out = asdict(self)
        out["module_class"], out["optimizer"] = self.module_class, self.optimizer
        out["capabilities"] = dict(vars(self.capabilities))
        return out


def resolve_lr(lr: float | None, capabilities: ModuleCapabilities) -> float:
    """``lr``, or the module's default."""
    return float(capabilities.default_lr if lr is None else lr)


def resolve_max_epochs(estimator: Any, capabilities: ModuleCapabilities, n_rows: int | None) -> int:
    """``max_epochs``, or the module's default for ``n_rows`` training rows."""
    if estimator.max_epochs is not None:
        return int(estimator.max_epochs)
    return capabilities.default_max_epochs(n_rows, estimator.batch_size)


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
    estimator: Any, module: type, tree: Tree, n_features: int, n_rows: int | None, forced_partition: str | None = None
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
    """
    from ...ops.groups import n_outputs

    capabilities = module_capabilities(module)
    partition = resolve_partition(estimator.partition, capabilities, forced_partition)
    stop = resolve_stop(estimator)
    return FitConfig(
        module_class=module,
        capabilities=capabilities,
        partition=partition,
        stop=stop,
        training=resolve_training(estimator.training, partition, module, capabilities),
        n_features=int(n_features),
        n_levels=int(tree.n_levels),
        n_scores=int(n_outputs(tree, partition=partition, stop=stop)),
        lr=resolve_lr(estimator.lr, capabilities),
        max_epochs=resolve_max_epochs(estimator, capabilities, n_rows),
        optimizer=estimator.optimizer if estimator.optimizer is not None else capabilities.default_optimizer,
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
