"""Growing a fitted classifier's tree: new classes below the old ones, without training again.

:meth:`HierarchicalClassifier.grow` runs :func:`run_grow`:

1. **check** the larger tree (:func:`grown_ids`): every class of the fitted tree is in it, with
   the same parent (and name); the first difference is a :class:`~hiclass_parallel.TreeError`
   that names it. Node ids may differ: classes are matched by label.
2. **carry** the network over: a net for the larger tree is built from the fitted
   configuration, and every weight of the fitted one is copied in, the output layer's rows
   (classes and stop scores) to their new columns (:func:`carry_state`); the optimizer's
   moments follow the same rows, so training continues where the fit left it.
3. **initialise** the new output rows from what is known (:func:`initial_rows`): the rows
   given for a new class (their mean hidden representation, "imprinted" at the norm and bias
   of the old rows of its softmax group), its class text (the text's hidden representation),
   else its parent's row; a new stop score (an old leaf that now has children) from the
   leaf's own prototype, so that its old rows still end there.
4. **train** the new output rows, and the input rows of the features the fit never saw
   (:func:`unseen_features`), on the rows given, with a replay of the old classes whose
   groups they touch: one pseudo-row per class, its prototype (the stored statistics of its
   training rows), so that the old classes are not forgotten without keeping their rows
   (:func:`replay_rows`).
5. **follow** the new tree with every fitted part: the class prototypes (rows moved, the new
   rows' sums and class text added), the estimator's ``tree`` and ``module__class_features``
   (persistence saves them as they now are); the answer calibrator and the linear terms are
   dropped, with a warning (:data:`_DROPPED_ON_GROWTH` says why).

Nothing is changed when a step fails: the method runs under
:func:`~._guards.keep_fitted_state_on_error`, the new net is a new object, and the parameters
set are put back.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.utils.validation import check_is_fitted

from ...exceptions import TreeError, caller_stacklevel
from ...losses import PathLocalCrossEntropy
from ...ops.groups import n_outputs, stop_columns
from ...tree import Tree
from .._checks import validate_X
from ..answer import PRIOR_TERMS, ClassPrototypes, GaussianPrototypes, prototypes_kind, wants_prototypes
from ..networks import MLP, SparseMLP, split_target
from ._build import build_net
from ._config import resolve_batch_size, resolve_max_epochs, resolve_softmax_sample
from ._fit import _draw_seed, seeded, training_threads
from ._guards import check_trained_scores
from ._params import attach_net
from ._targets import PathTargets, check_fit_sample_weight, item_weights

__all__ = ["carry_state", "grown_ids", "initial_rows", "replay_rows", "run_grow"]

#: Buffers a module builds from ``module__class_features``: the new module's own are kept.
_CLASS_TEXT_STATE = ("head.text_ptr", "head.text_idx", "head.text_val", "vocabulary", "vocabulary_position")

#: ``replay="auto"``: at most this many pseudo-rows per row given (the groups the new rows
#: touch may hold thousands of old classes; a sample of them counters the drift there).
REPLAY_PER_ROW = 4


# ---------------------------------------------------------------------------- 1. the trees
def grown_ids(old: Tree, new: Tree) -> np.ndarray:
    """The node id in ``new`` of every class of ``old``, where ``new`` grows ``old``.

    ``new`` grows ``old`` when it has every class of ``old`` (by label), each under the same
    parent (a top-level class stays top-level) and with the same name, and at least one class
    more. Node ids may differ.

    Parameters
    ----------
    old, new : Tree

    Returns
    -------
    ndarray of int64 of shape (old.n_classes,)

    Raises
    ------
    TreeError
        Naming the first class (in ``old``'s node-id order) that is missing, moved or
        renamed, or saying that ``new`` holds no new class.

    Examples
    --------
    >>> from hiclass_parallel import Tree
    >>> old = Tree.from_edges([("dog", "animal"), ("cat", "animal")])
    >>> new = Tree.from_edges([("cat", "animal"), ("puppy", "dog"), ("dog", "animal")])
    >>> grown_ids(old, new).tolist()
    [3, 1, 0]
    >>> grown_ids(old, Tree.from_edges([("dog", "animal"), ("cat", "dog")]))
    Traceback (most recent call last):
    ...
    hiclass_parallel.exceptions.TreeError: the new tree moves 'cat': its parent is 'animal' in the fitted tree, 'dog' in the new one
    """
    if not isinstance(new, Tree):
        raise TypeError(f"tree must be a Tree, got {type(new).__name__}")
    old_labels, new_labels = old.labels, new.labels
    if old_labels.dtype.kind != new_labels.dtype.kind and not (
            old_labels.dtype.kind in "OU" and new_labels.dtype.kind in "OU"):
        raise TreeError(f"the new tree's labels are of another kind ({new_labels.dtype}) than the fitted tree's "
                        f"({old_labels.dtype})")
    index = {label: i for i, label in enumerate(new_labels.tolist())}
    ids = np.full(old.n_classes, -1, dtype=np.int64)
    for c, label in enumerate(old_labels.tolist()):
        if label not in index:
            raise TreeError(f"the new tree lacks {label!r}, a class of the fitted tree: a grown tree keeps every "
                            "class (fit afresh to drop classes)")
        ids[c] = index[label]
    old_parents, new_parents = np.asarray(old.parents), np.asarray(new.parents)
    expected = np.where(old_parents >= 0, ids[np.maximum(old_parents, 0)], -1)
    moved = np.flatnonzero(new_parents[ids] != expected)
    if moved.size:
        c = int(moved[0])
        then = "the top level" if old_parents[c] < 0 else repr(old_labels[old_parents[c]])
        now = new_parents[ids[c]]
        raise TreeError(f"the new tree moves {old_labels[c]!r}: its parent is {then} in the fitted tree, "
                        f"{'the top level' if now < 0 else repr(new_labels[now])} in the new one")
    if old.has_names or new.has_names:
        renamed = np.flatnonzero(np.asarray(old.names)[:] != np.asarray(new.names)[ids])
        if renamed.size:
            c = int(renamed[0])
            raise TreeError(f"the new tree renames {old_labels[c]!r}: {old.names[c]!r} in the fitted tree, "
                            f"{new.names[ids[c]]!r} in the new one")
    if new.n_classes == old.n_classes:
        raise TreeError("the new tree holds no new class: grow adds classes (train on more rows with partial_fit)")
    return ids


def _score_columns(old: Tree, new: Tree, ids: np.ndarray, partition: str, stop: bool) -> np.ndarray:
    """The new score column of every old one: classes by :func:`grown_ids`, stop scores by the
    node (sibling partition) or the depth (level partition) whose paths they end."""
    columns = [ids]
    if stop:
        old_stop, new_stop = stop_columns(old, partition), stop_columns(new, partition)
        internal = np.flatnonzero(old_stop >= 0)
        mapped = np.empty(int(old_stop.max()) + 1 - old.n_classes if internal.size else 0, dtype=np.int64)
        mapped[old_stop[internal] - old.n_classes] = new_stop[ids[internal]]
        columns.append(mapped)
    return np.concatenate(columns)


# ---------------------------------------------------------------------------- 2. weights and moments
def carry_state(old: torch.nn.Module, new: torch.nn.Module, columns: np.ndarray) -> dict[str, np.ndarray]:
    """Copy every weight and buffer of ``old`` into ``new`` (built for the larger tree): those of
    the same shape as they are, the output layer's (first dimension the old number of scores)
    row by row to ``columns``; the class-text match weights by feature. Returns the row map of
    each parameter copied row by row (its name -> the new row of each old row), for the
    optimizer's moments.

    A tensor of neither kind is a ``ValueError`` naming it: the module holds something this
    function cannot place in the larger model.
    """
    old_state, new_state = old.state_dict(), new.state_dict()
    n_old, n_new = columns.size, int(getattr(new, "n_outputs", -1))
    maps: dict[str, np.ndarray] = {}
    index = torch.as_tensor(columns)
    with torch.no_grad():
        for name, target in new_state.items():
            if name in _CLASS_TEXT_STATE:
                continue  # built by the new module from the larger tree's class text
            if name not in old_state:
                raise ValueError(f"cannot grow {type(old).__name__}: the larger model has {name!r}, the fitted one not")
            source = old_state[name]
            if name.endswith("match_weight"):
                _carry_match_weights(old, new, source, target)
            elif source.shape == target.shape:
                target.copy_(source)
            elif source.dim() >= 1 and source.shape[0] == n_old and target.shape[0] == n_new \
                    and source.shape[1:] == target.shape[1:]:
                target[index.to(target.device)] = source.to(target.dtype)
                maps[name] = columns
            else:
                raise ValueError(
                    f"cannot grow {type(old).__name__}: its {name!r} of shape {tuple(source.shape)} is neither kept "
                    f"as it is nor a row per score ({n_old} scores before, {n_new} after)")
    return maps


def _carry_match_weights(old: torch.nn.Module, new: torch.nn.Module, source: torch.Tensor,
                         target: torch.Tensor) -> None:
    """The class-text match weight of each feature both vocabularies hold (a feature only the
    larger tree's class text holds starts at 0, as at a fit)."""
    position = new.vocabulary_position.cpu().numpy()
    old_vocabulary = old.vocabulary.cpu().numpy()
    at = position[old_vocabulary]
    keep = at >= 0
    target[torch.as_tensor(at[keep])] = source[torch.as_tensor(np.flatnonzero(keep))].to(target.dtype)


def carry_moments(old_net: Any, new_net: Any, maps: dict[str, np.ndarray]) -> None:
    """The optimizer's state (Adam's moments and step counts) of every parameter of the fitted
    net, in the new net's optimizer: rows moved as their parameter's (``maps``), new rows at 0."""
    old_opt, new_opt = getattr(old_net, "optimizer_", None), getattr(new_net, "optimizer_", None)
    if old_opt is None or new_opt is None:
        return
    old_params = dict(old_net.module_.named_parameters())
    new_params = dict(new_net.module_.named_parameters())
    for name, p_new in new_params.items():
        p_old = old_params.get(name)
        state = old_opt.state.get(p_old) if p_old is not None else None
        if not state:
            continue
        moved = {}
        for key, value in state.items():
            if not torch.is_tensor(value) or value.dim() == 0:
                moved[key] = value.clone() if torch.is_tensor(value) else copy.deepcopy(value)
            elif name in maps and value.shape[0] == p_old.shape[0]:
                grown = value.new_zeros((p_new.shape[0], *value.shape[1:]))
                grown[torch.as_tensor(maps[name]).to(value.device)] = value
                moved[key] = grown
            elif value.shape == p_new.shape or (name not in maps and value.shape[0] == p_new.shape[0]):
                moved[key] = value.clone()
            else:  # a state this function cannot place: the parameter starts afresh
                moved = {}
                break
        if moved:
            new_opt.state[p_new] = moved


def _output_layer(module: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(weight (n_scores, width), bias (n_scores,))`` views of the module's output layer, or
    ``None`` for a module whose output layer this does not know."""
    if isinstance(module, SparseMLP):
        return module.head.weight.weight, module.head.bias.weight[:, 0]
    if isinstance(module, MLP):
        return module.layers[-1].weight, module.layers[-1].bias
    return None


# ---------------------------------------------------------------------------- 3. new rows
@dataclasses.dataclass
class _Evidence:
    """What is known of each new column: the mean hidden representation of its rows (with its
    class text as one more row), or ``None``."""

    mean: dict[int, np.ndarray]
    source: dict[int, str]


def initial_rows(module: torch.nn.Module, tree: Tree, partition: str, stop: bool, new_columns: np.ndarray,
                 old_columns: np.ndarray, evidence: _Evidence) -> dict[str, int]:
    """Set the output rows of the new columns ``new_columns`` (``old_columns``: the columns the
    fitted model had, in the new numbering) from ``evidence``; returns how many came from each
    source (``"rows"``, ``"class text"``, ``"parent"``, ``"stop"``).

    A column with evidence (a mean hidden representation ``mu``) is imprinted: its row points
    along ``mu``, at the mean norm of the old rows of its softmax group, and its bias makes it
    tie, at ``mu``, with the best of the group's columns set so far: it wins only on rows more
    like its evidence than ``mu`` is, and leaves its neighbours the rows that are theirs. A
    class without evidence takes the mean row of the group's columns set so far (its parent's
    row when there are none) and a bias below theirs by ``log`` of their number: it starts as
    an unremarkable sibling, so an old answer is not taken from it before it has rows. A stop
    score without evidence has no pull: a zero row, the group's mean bias.
    """
    layer = _output_layer(module)
    counts = {"rows": 0, "class text": 0, "parent": 0, "stop": 0}
    if layer is None:
        return counts
    weight, bias = layer
    groups = np.asarray(tree.groups(partition), dtype=np.int64)
    if stop:
        groups = np.concatenate([groups, np.arange(1, tree.n_groups(partition), dtype=np.int64)])
    ready = np.zeros(groups.size, dtype=bool)  # the columns whose rows are set
    ready[old_columns] = True
    w = weight.detach().cpu().numpy().astype(np.float64)
    b = bias.detach().cpu().numpy().astype(np.float64)
    norms = np.linalg.norm(w, axis=1)
    all_norm, all_bias = float(norms[old_columns].mean()), float(b[old_columns].mean())
    parents = np.asarray(tree.parents)
    # stop scores first (they keep an old leaf's rows), then classes from the top level down
    # (a new class under a new class reads its parent's new row)
    order = sorted(new_columns.tolist(), key=lambda col: int(tree.depth[col]) if col < tree.n_classes else -1)
    for col in order:
        in_group = groups == groups[col]
        old_peers = np.flatnonzero(in_group & ready & np.isin(np.arange(groups.size), old_columns))
        peers = np.flatnonzero(in_group & ready)
        norm = float(norms[old_peers].mean()) if old_peers.size else all_norm
        mean = evidence.mean.get(col)
        if mean is not None and np.linalg.norm(mean) > 0:
            w[col] = mean / np.linalg.norm(mean) * norm
            b[col] = float((w[peers] @ mean + b[peers]).max() - w[col] @ mean) if peers.size else all_bias
            counts[evidence.source[col]] += 1
        elif col >= tree.n_classes:
            w[col], b[col] = 0.0, float(b[peers].mean()) if peers.size else all_bias
            counts["stop"] += 1
        else:
            if peers.size:
                w[col] = w[peers].mean(axis=0)
                b[col] = float(b[peers].min()) - float(np.log(peers.size + 1))
            else:
                parent = int(parents[col])
                w[col] = w[parent] if parent >= 0 else w[old_columns].mean(axis=0)
                b[col] = all_bias
            counts["parent"] += 1
        norms[col] = np.linalg.norm(w[col])
        ready[col] = True
    with torch.no_grad():
        index = torch.as_tensor(np.asarray(order, dtype=np.int64))
        weight[index] = torch.as_tensor(w[order], dtype=weight.dtype).to(weight.device)
        bias[index] = torch.as_tensor(b[order], dtype=bias.dtype).to(bias.device)
    return counts


# ---------------------------------------------------------------------------- 4. training the new rows
def _full_scores(module: torch.nn.Module, h: Any) -> torch.Tensor:
    """Every score of the hidden rows ``h`` (the output layer of :class:`MLP` or :class:`SparseMLP`)."""
    return module.head(h) if isinstance(module, SparseMLP) else module.layers[-1](h)


#: Training the new rows alone is a small problem: larger batches (fewer steps, each of little
#: work) and a larger learning rate than the network's fit.
NEW_ROWS_BATCH = 1024
NEW_ROWS_LR_SCALE = 4.0
#: The input rows of the features the fit never saw learn beside the new output rows, at this
#: multiple of the network's learning rate. Those rows are still their random start (no
#: training row had the feature), so a frozen input layer gives the new classes' own words
#: almost no weight; trained, they carry the new classes as a refit's would. Only a row holding
#: such a feature scores differently afterwards: the old classes keep their scores on every
#: row made of features the fit saw.
UNSEEN_INPUT_LR_SCALE = 30.0


class _Adam:
    """Adam on a few small tensors (torch's own costs seconds to build on first use)."""

    def __init__(self, params: list[torch.Tensor], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8):
        self.params, self.lr, self.betas, self.eps, self.t = params, lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self) -> None:
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            step = self.lr / (1 - b1 ** self.t)
            p.addcdiv_(m, (v / (1 - b2 ** self.t)).sqrt_().add_(self.eps), value=-step)


def unseen_features(module: torch.nn.Module, prototypes: Any, X: Any) -> np.ndarray:
    """The features of the rows ``X`` that no training row of the fit had: those of ``X``'s
    non-zeros whose column of the fitted class prototypes (the sums of the fit's rows per
    class) is empty. Empty unless the module has a sparse input layer (:class:`SparseMLP`),
    the fit kept :class:`ClassPrototypes` (without them what the fit saw is unknown) and ``X``
    is sparse."""
    if not (isinstance(module, SparseMLP) and isinstance(prototypes, ClassPrototypes) and sp.issparse(X)):
        return np.zeros(0, dtype=np.int64)
    seen = np.zeros(module.n_features, dtype=bool)
    sums = sp.csr_matrix(prototypes.sums)
    seen[sums.indices[sums.data != 0]] = True
    present = np.unique(sp.csr_matrix(X).indices).astype(np.int64)
    return present[~seen[present]]


def _input_bag(Xb: torch.Tensor, slot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(slots, offsets, values)`` of a sparse CSR batch on the trained input features
    (``slot``: each feature's row of the correction, ``-1`` none), for ``embedding_bag``."""
    crow, col, val = Xb.crow_indices(), Xb.col_indices(), Xb.values()
    row = torch.repeat_interleave(torch.arange(Xb.shape[0], device=col.device), crow[1:] - crow[:-1])
    k = slot[col]
    hit = k >= 0
    counts = torch.bincount(row[hit], minlength=Xb.shape[0])
    return k[hit], torch.cumsum(counts, 0) - counts, val[hit]


def train_new_rows(net: Any, config: Any, tree: Tree, dataset: Any, new_columns: np.ndarray, epochs: int,
                   batch_size: int, seed: int | None, inputs: np.ndarray | None = None) -> None:
    """Train the output rows (and biases) of the new columns, and the input rows of the
    features ``inputs`` (:func:`unseen_features`), every other weight frozen. Each epoch
    minimises the tree loss of the training route (the sibling cross-entropy of the groups on
    each labelled path, or every group's) over corrections of those rows.

    The frozen part is computed once: the hidden rows and, for the rows that hold none of
    ``inputs`` (the replay's, and most old rows), their scores; only a row that holds one of
    ``inputs`` gets a hidden correction, and its scores move by it. The old classes' scores
    stay as they were on every row without such a feature."""
    import torch.nn.functional as F


    module = net.module_
    weight, bias = _output_layer(module)
    if config.path_local:
        criterion = PathLocalCrossEntropy(tree, stop=config.stop)
    else:
        options = {k: v for k, v in config.criterion_options.items() if k != "level_contrast"}
        criterion = config.criterion(tree=tree, stop=config.stop, **options)
    criterion.eval()  # the exact loss: no in-batch term, nothing drawn
    device = weight.device
    new_index = torch.as_tensor(new_columns, device=device)
    position = torch.full((config.n_scores,), -1, dtype=torch.int64, device=device)
    position[new_index] = torch.arange(new_columns.size, device=device)
    delta_w = torch.zeros(new_columns.size, weight.shape[1], device=device, requires_grad=True)
    delta_b = torch.zeros(new_columns.size, device=device, requires_grad=True)
    adam = _Adam([delta_w, delta_b], lr=NEW_ROWS_LR_SCALE * config.lr)
    inputs = np.zeros(0, dtype=np.int64) if inputs is None else np.asarray(inputs, dtype=np.int64)
    train_inputs = inputs.size > 0 and dataset.sparse_batches
    if train_inputs:
        slot = torch.full((module.n_features,), -1, dtype=torch.int64, device=device)
        slot[torch.as_tensor(inputs, device=device)] = torch.arange(inputs.size, device=device)
        delta_in = torch.zeros(inputs.size, weight.shape[1], device=device, requires_grad=True)
        adam_in = _Adam([delta_in], lr=UNSEEN_INPUT_LR_SCALE * config.lr)
        X = dataset.X if dataset.rows is None else dataset.X[dataset.rows]
        moving = np.asarray(sp.csr_matrix(X)[:, inputs].getnnz(axis=1) > 0)
    else:
        moving = np.zeros(len(dataset), dtype=bool)
    was_training = module.training
    module.eval()
    size = max(batch_size, NEW_ROWS_BATCH)
    batches = []
    with torch.no_grad():  # the frozen part, once; the rows that can move in batches of their own
        for part in (np.flatnonzero(moving), np.flatnonzero(~moving)):
            for start in range(0, part.size, size):
                Xb, yb = dataset._rows(part[start:start + size])
                ids, w = split_target(yb)
                h = module.encode(Xb.to(device))
                batches.append({"h": h, "rows": h.h if hasattr(h, "words") else h, "ids": ids.to(device),
                                "w": None if w is None else w.to(device),
                                "bag": _input_bag(Xb.to(device), slot) if moving[part[start]] else None})
    rng = np.random.default_rng(seed)
    try:
        for _ in range(epochs):
            for i in rng.permutation(len(batches)):
                batch = batches[i]
                rows, bag = batch["rows"], batch["bag"]
                dh = None if bag is None else F.embedding_bag(bag[0], delta_in, bag[1], mode="sum",
                                                              per_sample_weights=bag[2])
                if config.path_local:
                    def score(samples: torch.Tensor, columns: torch.Tensor, batch: dict = batch,
                              dh: torch.Tensor | None = dh) -> torch.Tensor:
                        if "frozen" not in batch:  # the same pairs every epoch: scored once
                            with torch.no_grad():
                                batch["frozen"] = module.scorer(batch["h"])(samples, columns)
                                unique, where = torch.unique(columns, return_inverse=True)
                                at = position[columns]
                                new = torch.nonzero(at >= 0)[:, 0]
                                batch.update(unique=unique, where=where, new=new, at=at[new],
                                             w_unique=weight[unique].detach().clone() if dh is not None else None)
                        base, new, at = batch["frozen"], batch["new"], batch["at"]
                        hidden = batch["rows"][samples[new]]
                        if dh is not None:  # the frozen rows' scores of the hidden correction
                            base = base + (dh @ batch["w_unique"].t())[samples, batch["where"]]
                            hidden = hidden + dh[samples[new]]
                        return base.index_put((new,), base[new] + (hidden * delta_w[at]).sum(1) + delta_b[at])

                    loss = criterion(score, batch["ids"], batch["w"])
                else:
                    if "frozen" not in batch:
                        with torch.no_grad():
                            batch["frozen"] = _full_scores(module, batch["h"])
                    hidden = rows if dh is None else rows + dh
                    scores = batch["frozen"] if dh is None else batch["frozen"] + dh @ weight.detach().t()
                    scores = scores.index_add(1, new_index, hidden @ delta_w.t() + delta_b)
                    loss = criterion(scores, batch["ids"], batch["w"])
                delta_w.grad = delta_b.grad = None
                if dh is not None:
                    delta_in.grad = None
                loss.backward()
                adam.step()
                if dh is not None:  # only a batch of moving rows has a gradient for the input rows
                    adam_in.step()
    finally:
        module.train(was_training)
    with torch.no_grad():
        weight[new_index] += delta_w.to(weight.dtype)
        bias[new_index] += delta_b.to(bias.dtype)
        if train_inputs:
            table = module.input.embedding.weight
            table[torch.as_tensor(inputs, device=device)] += delta_in.to(table.dtype)


def _hidden(net: Any, targets: Any, X: Any, sparse: bool) -> np.ndarray:
    """The hidden representation of the rows ``X`` (``encode``; class text's ``TextBatch``: its rows)."""
    parts = []
    for h in net.outputs(targets.dataset(X, None, sparse), hidden=True):
        parts.append((h.h if hasattr(h, "words") else h).detach().cpu().numpy().astype(np.float64))
    return np.concatenate(parts) if parts else np.zeros((0, 0))


def _evidence(net: Any, targets: Any, sparse: bool, new_tree: Tree, new_columns: np.ndarray, X: Any,
              ids: np.ndarray | None, text: sp.csr_matrix | None, prototypes: Any, stop_owner: dict[int, int],
              old_ids: np.ndarray) -> _Evidence:
    """The mean hidden representation of each new class's rows (every row whose label's path
    passes through it) and class text, and of each new stop score's node's old prototype."""
    mean, source = {}, {}
    new_classes = new_columns[new_columns < new_tree.n_classes]
    sums = {int(c): None for c in new_classes}
    counts = dict.fromkeys(sums, 0.0)
    if X is not None and ids is not None and (ids >= 0).any():
        labelled = np.flatnonzero(ids >= 0)
        paths = np.asarray(new_tree.paths)[ids[labelled]]
        through = np.isin(paths, new_classes)
        if through.any():
            H = _hidden(net, targets, X[labelled[through.any(axis=1)]], sparse)
            rows_paths = paths[through.any(axis=1)]
            for c in new_classes:
                hit = (rows_paths == c).any(axis=1)
                if hit.any():
                    sums[int(c)] = H[hit].sum(axis=0)
                    counts[int(c)] = float(hit.sum())
    with_text = []
    if text is not None:
        lengths = np.diff(text.indptr)
        with_text = [int(c) for c in new_classes if lengths[c] > 0]
        if with_text:
            H = _hidden(net, targets, text[with_text], sparse)
            for c, h in zip(with_text, H):
                sums[c] = h if sums[c] is None else sums[c] + h
                counts[c] += 1.0
    for c, total in sums.items():
        if total is not None:
            mean[c] = total / counts[c]
            source[c] = "rows" if counts[c] > (1.0 if c in with_text else 0.0) else "class text"
    pseudo = _prototype_rows(prototypes, [old_ids[n] for n in stop_owner.values()])
    if pseudo is not None:
        H = _hidden(net, targets, pseudo, sparse)
        for (col, _), h in zip(stop_owner.items(), H):
            mean[col], source[col] = h, "stop"
    return _Evidence(mean, source)


# ---------------------------------------------------------------------------- 5. the replay
def _prototype_rows(prototypes: Any, classes: list[int] | np.ndarray) -> Any:
    """One pseudo-row per class (old node ids) from the fitted prototypes: the cosine kind's
    sums scaled to unit length (a row of a vectorizer's kind), the Gaussian kind's means;
    ``None`` without prototypes or classes."""
    classes = np.asarray(classes, dtype=np.int64)
    if prototypes is None or classes.size == 0:
        return None
    if isinstance(prototypes, ClassPrototypes):
        rows = sp.csr_matrix(prototypes.sums[classes], dtype=np.float32)
        norm = np.sqrt(np.asarray(rows.multiply(rows).sum(axis=1)).ravel())
        return sp.csr_matrix(sp.diags(np.divide(1.0, norm, out=np.zeros_like(norm), where=norm > 0)) @ rows,
                             dtype=np.float32)
    if isinstance(prototypes, GaussianPrototypes):
        counts = np.asarray(prototypes.counts, dtype=np.float64)[classes]
        return (prototypes.sums[classes] / np.maximum(counts, 1e-12)[:, None]).astype(np.float32)
    return None


def replay_rows(prototypes: Any, new_tree: Tree, ids_old_to_new: np.ndarray, new_columns: np.ndarray,
                partition: str, limit: int, rng: np.random.Generator) -> tuple[Any, np.ndarray]:
    """The replay: one pseudo-row (:func:`_prototype_rows`) per old class whose rows the new
    classes could take, at most ``limit`` of them (a random sample), each labelled with its
    class (new node ids). Under the sibling partition those are the old classes at or below a
    new class's parent (the rows that reach its group); under the level partition, every old
    class. Classes whose prototype is empty (no row, no class text) are skipped; ``(None,
    empty)`` without prototypes."""
    if prototypes is None or limit <= 0:
        return None, np.zeros(0, dtype=np.int64)
    new_classes = new_columns[new_columns < new_tree.n_classes]
    parents = np.unique(np.asarray(new_tree.parents)[new_classes])
    old_paths = np.asarray(new_tree.paths)[ids_old_to_new]
    if partition == "level" or (parents < 0).any():
        candidates = np.arange(ids_old_to_new.size)
    else:
        candidates = np.flatnonzero(np.isin(old_paths, parents).any(axis=1))  # old node ids
    if candidates.size == 0:
        return None, np.zeros(0, dtype=np.int64)
    rows = _prototype_rows(prototypes, candidates)
    filled = (np.diff(rows.indptr) > 0) if sp.issparse(rows) else np.abs(rows).sum(axis=1) > 0
    candidates, rows = candidates[filled], rows[np.flatnonzero(filled)]
    if candidates.size > limit:
        pick = np.sort(rng.choice(candidates.size, limit, replace=False))
        candidates, rows = candidates[pick], rows[pick]
    return rows, ids_old_to_new[candidates]


# ---------------------------------------------------------------------------- 6. the fitted parts
def _grown_prototypes(prototypes: Any, ids: np.ndarray, new_tree: Tree) -> Any:
    """The fitted prototypes with every old class's statistics at its new node id (a new
    object; new classes start empty)."""
    if prototypes is None:
        return None
    if isinstance(prototypes, ClassPrototypes):
        move = sp.csr_matrix((np.ones(ids.size, dtype=np.float32), (ids, np.arange(ids.size))),
                             shape=(new_tree.n_classes, ids.size))
        return ClassPrototypes(sums=sp.csr_matrix(move @ prototypes.sums, dtype=np.float32))
    if isinstance(prototypes, GaussianPrototypes):
        sums = np.zeros((new_tree.n_classes, prototypes.sums.shape[1]), dtype=prototypes.sums.dtype)
        counts = np.zeros(new_tree.n_classes, dtype=np.asarray(prototypes.counts).dtype)
        sums[ids], counts[ids] = prototypes.sums, prototypes.counts
        return dataclasses.replace(prototypes, sums=sums, counts=counts, parents=np.asarray(new_tree.parents),
                                   depth=np.asarray(new_tree.depth))
    raise TypeError(f"cannot move class prototypes of kind {type(prototypes).__name__} to a larger tree")


def _class_text(estimator: Any, given: Any, ids: np.ndarray, new_tree: Tree) -> tuple[sp.csr_matrix | None, bool]:
    """The class text of the larger tree (one row per class, in its node-id order) and whether
    the model matches class text (``module__class_features``): the rows given, else the fitted
    model's own rows moved to their new ids (new classes without text)."""
    fitted = estimator._skorch_kwargs("module__").get("class_features")
    matches = sp.issparse(fitted)
    n_features = estimator.n_features_in_
    if given is not None:
        if not sp.issparse(given):
            raise TypeError(f"class_features must be a scipy sparse matrix (n_classes, n_features), got "
                            f"{type(given).__name__}")
        given = sp.csr_matrix(given, dtype=np.float32)
        if given.shape != (new_tree.n_classes, n_features):
            raise ValueError(f"class_features has shape {given.shape}: it needs one row per class of the new tree "
                             f"({new_tree.n_classes}, in its node-id order) and one column per feature "
                             f"({n_features})")
        if not np.isfinite(given.data).all():
            raise ValueError("class_features holds NaN or infinite values")
        return given, matches
    if not matches:
        return None, False
    fitted = sp.csr_matrix(fitted, dtype=np.float32)
    move = sp.csr_matrix((np.ones(ids.size, dtype=np.float32), (ids, np.arange(ids.size))),
                         shape=(new_tree.n_classes, ids.size))
    return sp.csr_matrix(move @ fitted, dtype=np.float32), True


#: What growing drops from the answer model, and why.
_DROPPED_ON_GROWTH = {
    "calibrator": ("it was fitted for the weights before and knew none of the new classes. predict_confidence now "
                    "gives the model's own probability; fit afresh to calibrate again"),
    # Kept, its SVM would give every new class the margin of a class that was no target while
    # the old classes near it keep theirs: the re-ranking would pass over the new classes.
    "flat_term": ("its linear SVM was fitted on the earlier classes' rows and knows none of the new classes, which "
                   "it would rank below their old neighbours. The answers are now re-ranked without it; fit afresh "
                   "to keep it"),
    # Its margins of the old nodes would favour the new classes' old siblings, and a new
    # class on no training path gets the margin of a node no row holds.
    "path_term": ("its linear SVMs were fitted on the earlier classes' rows and know none of the new classes, which "
                  "it would rank below their old neighbours. The answers are now re-ranked without it; fit afresh "
                  "to keep it"),
}


# ---------------------------------------------------------------------------- the entry point
def run_grow(estimator: Any, tree: Tree, X: Any = None, y: Any = None, *, sample_weight: Any = None,
             class_features: Any = None, replay: str | int | None = "auto", max_epochs: int | None = None,
             train: str = "new") -> Any:
    """:meth:`HierarchicalClassifier.grow`: see its docstring. Runs under
    :func:`~._guards.keep_fitted_state_on_error` (the caller's)."""
    check_is_fitted(estimator)
    if type(estimator)._targets is not PathTargets:
        raise TypeError(f"{type(estimator).__name__} reads label sets; grow serves HierarchicalClassifier")
    if not (replay is None or replay == "auto" or (isinstance(replay, (int, np.integer))
                                                   and not isinstance(replay, bool) and replay >= 0)):
        raise ValueError(f"replay must be 'auto', a number of pseudo-rows >= 0 or None, got {replay!r}")
    if train not in ("new", "all"):
        raise ValueError(f"train must be 'new' (the new output rows alone) or 'all' (the whole network), got {train!r}")
    if max_epochs is not None and (isinstance(max_epochs, bool) or not isinstance(max_epochs, (int, np.integer))
                                   or max_epochs < 0):
        raise ValueError(f"max_epochs must be an int >= 0 or None, got {max_epochs!r}")
    old_targets, config = estimator.targets_, estimator.config_
    old_tree = old_targets.tree
    ids = grown_ids(old_tree, tree)
    columns = _score_columns(old_tree, tree, ids, config.partition, config.stop)

    targets = copy.copy(old_targets)
    targets._set(tree, old_targets.pad)
    if old_targets.source is not None:
        targets.source = tree
    if (X is None) != (y is None):
        raise ValueError("grow takes rows X with their labels y, or neither (the new classes then start from their "
                         "class text or their parent)")
    row_ids, weights = None, None
    if X is not None:
        X = validate_X(estimator, X, reset=False)
        row_ids = targets.encode(X, y)  # labels of the larger tree; an unknown one is named
        weights = check_fit_sample_weight(sample_weight, int(X.shape[0]))
    elif sample_weight is not None:
        raise ValueError("sample_weight weighs the rows X: give X and y with it")
    text, matches = _class_text(estimator, class_features, ids, tree)
    softmax_sample, softmax_why = resolve_softmax_sample(getattr(estimator, "softmax_sample", "auto"),
                                                         config.step_engine, tree, config.stop)
    new_config = dataclasses.replace(config, n_levels=int(tree.n_levels),
                                     n_scores=int(n_outputs(tree, config.partition, config.stop)),
                                     softmax_sample=softmax_sample, softmax_sample_reason=softmax_why)
    # The parameters the larger net is built from; put back if anything below fails.
    before = {name: getattr(estimator, name) for name in ("tree", "module__class_features") if hasattr(estimator, name)}
    if estimator.tree is not None:
        estimator.tree = tree
    if matches:
        estimator.module__class_features = text
    try:
        return _grow(estimator, tree, old_tree, ids, columns, targets, new_config, X, row_ids, weights, text,
                     replay, max_epochs, train)
    except BaseException:
        for name, value in before.items():
            setattr(estimator, name, value)
        raise


def _grow(estimator: Any, tree: Tree, old_tree: Tree, ids: np.ndarray, columns: np.ndarray, targets: Any,
          config: Any, X: Any, row_ids: np.ndarray | None, weights: np.ndarray | None, text: Any, replay: Any,
          max_epochs: int | None, train: str) -> Any:
    """The larger net built, carried over, initialised and trained; the fitted parts moved."""
    old_net = estimator.net_
    sparse = config.capabilities.accepts_sparse
    seed = _draw_seed(estimator)
    rng = np.random.default_rng(seed)
    answer = estimator.answer_
    prototypes = answer.term("prototypes")
    is_new = np.ones(config.n_scores, dtype=bool)
    is_new[columns] = False
    new_columns = np.flatnonzero(is_new)
    stop_owner: dict[int, int] = {}  # a new stop column -> the old node whose paths it ends
    if config.stop and config.partition == "sibling":
        stop_col = stop_columns(tree, "sibling")
        old_of_new = np.full(tree.n_classes, -1, dtype=np.int64)
        old_of_new[ids] = np.arange(ids.size)
        for node in np.flatnonzero((stop_col >= 0) & (old_of_new >= 0)):
            if is_new[stop_col[node]]:
                stop_owner[int(stop_col[node])] = int(old_of_new[node])

    net = build_net(estimator, config, targets, seed)
    with training_threads(estimator, config.threads), seeded(estimator, seed):
        net.initialize()
        maps = carry_state(old_net.module_, net.module_, columns)
        carry_moments(old_net, net, maps)
        evidence = _evidence(net, targets, sparse, tree, new_columns, X, row_ids, text, prototypes, stop_owner,
                             np.arange(ids.size))
        counts = initial_rows(net.module_, tree, config.partition, config.stop, new_columns, columns, evidence)
        train_X, train_ids, train_weights = X, row_ids, weights
        limit = 0 if replay is None or row_ids is None else (
            REPLAY_PER_ROW * int((row_ids >= 0).sum()) if replay == "auto" else int(replay))
        pseudo, pseudo_ids = replay_rows(prototypes, tree, ids, new_columns, config.partition, limit, rng)
        if pseudo is not None and pseudo_ids.size:
            train_X = sp.vstack([sp.csr_matrix(X, dtype=np.float32), pseudo], format="csr") if sp.issparse(X) else \
                np.concatenate([np.asarray(X, dtype=np.float32), np.asarray(pseudo, dtype=np.float32)])
            train_ids = np.concatenate([row_ids, pseudo_ids])
            # A pseudo-row stands for a whole class: the replay weighs at least as much as the rows given.
            given = float(np.sum(weights)) if weights is not None else float(row_ids.size)
            each = max(1.0, given / pseudo_ids.size)
            train_weights = np.concatenate([np.ones(row_ids.size) if weights is None else weights,
                                            np.full(pseudo_ids.size, each)])
        epochs, inputs = 0, np.zeros(0, dtype=np.int64)
        if train_X is not None and (train_ids >= 0).any():
            n_rows = int(train_X.shape[0])
            batch_size = resolve_batch_size(estimator.batch_size, config.capabilities, n_rows)[0]
            epochs = int(max_epochs) if max_epochs is not None else \
                resolve_max_epochs(estimator, config.capabilities, n_rows, batch_size)
            dataset = targets.dataset(train_X, train_ids, sparse)
            dataset.weight = item_weights(train_weights, getattr(estimator, "class_weight", None), tree, train_ids)
            if epochs and train == "new" and _output_layer(net.module_) is not None:
                inputs = unseen_features(net.module_, prototypes, X)
                train_new_rows(net, config, tree, dataset, new_columns, epochs, batch_size, seed, inputs)
            elif epochs:  # the whole network (or a module whose output layer this does not know)
                net.set_params(batch_size=batch_size)
                net.partial_fit(dataset, None, epochs=epochs)
            check_trained_scores(net, dataset)
    grown = _grown_prototypes(prototypes, ids, tree)
    if grown is not None and X is not None and wants_prototypes(estimator, X):
        grown.add(prototypes_kind(X).from_rows(X, row_ids, tree, sample_weight=weights))
    if grown is not None and text is not None and hasattr(grown, "add_sums"):
        fresh = np.zeros(tree.n_classes, dtype=np.float32)
        fresh[new_columns[new_columns < tree.n_classes]] = 1.0  # the old classes have theirs already
        grown.add_sums(sp.diags(fresh) @ text)
    for part, why in _DROPPED_ON_GROWTH.items():
        if (answer.calibrator if part == "calibrator" else answer.term(part)) is not None:
            warnings.warn(f"grow drops the answer model's {part.replace('_', ' ')}: {why}", UserWarning,
                          stacklevel=caller_stacklevel())
    for part in PRIOR_TERMS:
        if answer.term(part) is not None:
            config = dataclasses.replace(config, **{f"{part}_reason": "dropped when the tree grew"})
            answer = answer.without(part)
    answer = answer.replace(calibrator=None)
    if grown is not None:
        answer = answer.replace(terms={**answer.terms, "prototypes": grown})
    vars(estimator).update(targets.fitted_attributes(), targets_=targets, config_=config, answer_=answer)
    estimator.grown_ = {"new_classes": tree.labels[new_columns[new_columns < tree.n_classes]],
                        "initialised_from": counts, "epochs": epochs, "unseen_features": int(inputs.size),
                        "replayed": int(0 if pseudo is None else pseudo_ids.size)}
    attach_net(estimator, net)
    return estimator
