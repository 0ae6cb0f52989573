"""``LazyAdam``: Adam for models whose big layers get sparse gradients.

A text model's input layer has one row per feature (483,569 for WordNet's nouns) and its
output layer one row per class; a batch touches a few thousand of them. Dense Adam reads and
writes every row of the parameter and both moments at every step; ``torch.optim.SparseAdam``
takes only sparse gradients. ``LazyAdam`` takes both: sparse gradients update only the rows
present (their moments decay only when touched, as in SparseAdam and TensorFlow's LazyAdam),
in one pass per row in C where the kernel was built (``estimators/networks/_path_step.c``, ``adam_rows``), else
in torch operations; dense ones get Adam's update in torch operations (a dense gradient of a
parameter that keeps one second moment per row steps as a sparse gradient of every row, so that
the torch route of a model fed dense rows updates it as the fused step does).

A parameter group may keep one second moment per row instead of one per entry
(``second_moment="row"``: the mean of the row's squared gradient, as the row-wise optimizers of
embedding libraries do): the update of a touched row then reads and writes 20 bytes per entry
instead of 28, and it is memory-bound. A group may also scale the learning rate
(``lr_scale``), so that schedules and ``set_params(lr=...)`` keep the groups' ratio, and keep
its first moment in bfloat16 (``first_moment="bfloat16"``: half its memory, 4 bytes fewer moved
per touched entry; the arithmetic stays float32). The classifier asks for all three on the input
layer of :class:`~hiclass_parallel.estimators.SparseMLP` and for bfloat16 first moments on its
output layer (``docs/performance.md`` has the time of the update).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from . import _native_path_step
from ._native_path_step import RowUpdate, adam_rows

__all__ = ["LazyAdam"]


def _native_rows(p: torch.Tensor, *tensors: torch.Tensor) -> bool:
    """Whether the C row update serves: float32 CPU tensors (the first moment, ``tensors[0]``,
    float32 or bfloat16), the state contiguous, the kernel built."""
    return (
        p.dtype == torch.float32 and p.device.type == "cpu" and p.is_contiguous() and p.dim() >= 1
        and all(t.dtype in (_native_path_step.FIRST_MOMENT_DTYPES if i == 0 else (torch.float32,))
                and t.device.type == "cpu" for i, t in enumerate(tensors))
        and all(t.is_contiguous() for t in tensors[:2]) and _native_path_step.available()
    )


#: ``first_moment``'s values: the storage of a new first-moment state.
_FIRST_MOMENTS = ("float32", "bfloat16")


def _check_group_options(group: dict[str, Any]) -> None:
    """The options LazyAdam adds to Adam's, where a group (or the defaults) gives them."""
    if "second_moment" in group and group["second_moment"] not in ("entry", "row"):
        raise ValueError(f"second_moment must be 'entry' or 'row', got {group['second_moment']!r}")
    if "first_moment" in group and group["first_moment"] not in _FIRST_MOMENTS:
        raise ValueError(f"first_moment must be 'float32' or 'bfloat16', got {group['first_moment']!r}")
    scale = group.get("lr_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"lr_scale must be a positive number, got {scale!r}")


def _every_row(grad: torch.Tensor) -> torch.Tensor:
    """A dense gradient as a coalesced sparse one that lists every row (zero rows included)."""
    rows = torch.arange(grad.shape[0], device=grad.device).unsqueeze(0)
    return torch.sparse_coo_tensor(rows, grad, grad.shape, is_coalesced=True, check_invariants=False)


class LazyAdam(torch.optim.Optimizer):
    """Adam that updates only the rows a sparse gradient touches.

    Parameters
    ----------
    params : iterable of torch.Tensor or dict
        Parameters or parameter groups.
    lr : float, default=1e-3
    betas : tuple of float, default=(0.9, 0.999)
    eps : float, default=1e-8
    weight_decay : float, default=0.0
        L2 penalty added to the gradient (for sparse gradients, on the touched rows only).
    second_moment : {"entry", "row"}, default="entry"
        The second-moment estimate of a parameter that gets sparse gradients: ``"entry"``, one
        per entry, Adam's own (``torch.optim.SparseAdam``'s numbers); ``"row"``, one per row
        of a parameter of two or more dimensions (the mean of the row's squared gradient: a
        state of one float per row instead of a row, and 20 bytes moved per touched entry
        instead of 28). Usually set per parameter group (skorch's
        ``optimizer__param_groups``). Dense gradients always get Adam's per-entry update. A
        state loaded from a checkpoint keeps the form it was saved with.
    lr_scale : float, default=1.0
        Multiplier of ``lr`` for the group: its step uses ``lr * lr_scale``. Usually set per
        parameter group; a learning-rate schedule, which changes ``lr``, keeps the ratio.
    first_moment : {"float32", "bfloat16"}, default="float32"
        The storage of the first-moment estimate: ``"bfloat16"`` keeps it in half the memory
        (the update computes in float32 and stores the moment rounded to the nearest
        bfloat16), so a touched entry moves 4 fewer bytes. Usually set per parameter group. A
        state loaded from a checkpoint keeps the dtype it was saved with.

    Examples
    --------
    >>> import torch
    >>> from hiclass_parallel.estimators import LazyAdam
    >>> emb = torch.nn.Embedding(10, 4, sparse=True)
    >>> opt = LazyAdam(emb.parameters(), lr=0.1)
    >>> before = emb.weight.detach().clone()
    >>> emb(torch.tensor([3])).sum().backward()
    >>> opt.step()
    >>> changed = (emb.weight.detach() != before).any(1)
    >>> changed.nonzero().flatten().tolist()  # only the row used
    [3]
    >>> opt = LazyAdam([{"params": emb.parameters(), "second_moment": "row"}], lr=0.1)
    >>> emb(torch.tensor([3])).sum().backward()
    >>> opt.step()
    >>> opt.state[emb.weight]["exp_avg_sq"].shape  # one second moment per row
    torch.Size([10, 1])
    >>> layer = torch.nn.Linear(2, 2)
    >>> opt = LazyAdam([{"params": [layer.weight], "lr_scale": 3.0}, {"params": [layer.bias]}], lr=0.01)
    >>> [group["lr"] * group["lr_scale"] for group in opt.param_groups]  # the steps' rates
    [0.03, 0.01]
    >>> opt = LazyAdam([{"params": emb.parameters(), "first_moment": "bfloat16"}], lr=0.1)
    >>> emb(torch.tensor([3])).sum().backward()
    >>> opt.step()
    >>> opt.state[emb.weight]["exp_avg"].dtype
    torch.bfloat16
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        second_moment: str = "entry",
        lr_scale: float = 1.0,
        first_moment: str = "float32",
    ):
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas!r}")
        if not eps >= 0 or not weight_decay >= 0:
            raise ValueError(f"eps and weight_decay must be non-negative, got {eps!r}, {weight_decay!r}")
        _check_group_options({"second_moment": second_moment, "lr_scale": lr_scale, "first_moment": first_moment})
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "second_moment": second_moment, "lr_scale": lr_scale,
                                  "first_moment": first_moment})

    # torch decorates these two with torch._disable_dynamo, whose first call imports
    # torch._dynamo (and sympy): seconds of a text model's fit in a fresh process, for nothing
    # this optimizer compiles. Their bodies are torch's own, undecorated.
    _add_param_group = getattr(torch.optim.Optimizer.add_param_group, "__wrapped__",
                               torch.optim.Optimizer.add_param_group)
    zero_grad = getattr(torch.optim.Optimizer.zero_grad, "__wrapped__", torch.optim.Optimizer.zero_grad)

    _load_state_dict = getattr(torch.optim.Optimizer.load_state_dict, "__wrapped__",
                               torch.optim.Optimizer.load_state_dict)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's ``load_state_dict``, except that a bfloat16 first moment stays bfloat16
        (torch casts every floating state to its parameter's dtype)."""
        dtypes = {key: state["exp_avg"].dtype for key, state in state_dict.get("state", {}).items()
                  if isinstance(state, dict) and isinstance(state.get("exp_avg"), torch.Tensor)}
        self._load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for key, dtype in dtypes.items():
            state = self.state[params[key]]
            if state["exp_avg"].dtype != dtype:
                state["exp_avg"] = state["exp_avg"].to(dtype)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's ``add_param_group``, with the group's ``second_moment`` and ``lr_scale`` checked."""
        _check_group_options(param_group)
        self._add_param_group(param_group)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            # While the closure runs, a fused step may apply this step's row updates itself
            # (fused_row_updates); called outside a step (a loop that accumulates gradients
            # over batches and steps later), it must not.
            self._in_step = True
            try:
                with torch.enable_grad():
                    loss = closure()
            finally:
                self._in_step = False
        for group in self.param_groups:
            dense: list[torch.Tensor] = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    self._sparse_step(p, group)
                elif self._row_moment(p, group):
                    # A dense gradient of a parameter with one second moment per row (SparseMLP's
                    # input layer fed dense rows, on the torch route): every row was touched, so it
                    # steps as the fused step's gradient of every row does.
                    self._sparse_step(p, group, _every_row(p.grad))
                else:
                    dense.append(p)
            if dense:
                lr, (b1, b2), eps, wd = group["lr"] * group.get("lr_scale", 1.0), group["betas"], group["eps"], \
                    group["weight_decay"]
                self._dense_step(dense, group, lr, b1, b2, eps, wd)
        return loss

    def fused_row_updates(self, *params: torch.Tensor) -> list[RowUpdate] | None:
        """This step's Adam updates of ``params``' touched rows, for a caller that applies them
        itself as it computes the gradients (the fused training step), or ``None`` where it
        cannot: outside :meth:`step`'s closure (a loop that accumulates gradients over batches
        and steps later must get gradients), a parameter without a gradient-free slot in this
        optimizer (its ``.grad`` is set, or it is in no group) or whose state the C row update
        cannot serve. On success
        each parameter's step count has advanced, as :meth:`step` would have advanced it; the
        caller must then apply every update, and leave the parameters' ``.grad`` unset so that
        :meth:`step` does not update them again."""
        if not getattr(self, "_in_step", False):  # only inside step(closure): the update is due now
            return None
        found = []
        for p in params:
            group = next((g for g in self.param_groups if any(q is p for q in g["params"])), None)
            if group is None or p.grad is not None or p.dim() < 2:
                return None
            state = self._state(p, group)
            if not _native_rows(p, state["exp_avg"], state["exp_avg_sq"]):
                return None
            found.append((p, group))
        return [self._row_update(p, group) for p, group in found]

    def _row_update(self, p: torch.Tensor, group: dict[str, Any]) -> RowUpdate:
        """Advance ``p``'s step; the numbers of its sparse update (a group without the options,
        as one loaded from another optimizer's state: ``lr_scale`` 1, per-entry second moment)."""
        state = self._state(p, group)
        state["step"] += 1
        step = float(state["step"])
        (b1, b2), v = group["betas"], state["exp_avg_sq"]
        return RowUpdate(state["exp_avg"], v, lr_t=group["lr"] * group.get("lr_scale", 1.0) / (1 - b1**step),
                         beta1=b1, beta2=b2, eps=group["eps"], weight_decay=group["weight_decay"],
                         bias_correction2=1 - b2**step)

    def _state(self, p: torch.Tensor, group: dict[str, Any] | None = None) -> dict[str, Any]:
        """``p``'s state; a new one takes its form from ``group`` (``None``: Adam's own): one
        second moment per row with ``second_moment="row"`` (when ``p`` has rows), per entry
        otherwise; the first moment in ``first_moment``'s dtype. From then on the state's shape
        and dtype say which."""
        state = self.state[p]
        if not state:
            group = group or {}
            state["step"] = torch.zeros((), dtype=torch.float32)
            # bfloat16 stores a float32 parameter's moment in half the bytes; any other dtype is kept
            half = group.get("first_moment", "float32") == "bfloat16" and p.dtype == torch.float32
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.bfloat16 if half else p.dtype)
            by_row = group.get("second_moment", "entry") == "row" and p.dim() >= 2
            state["exp_avg_sq"] = p.new_zeros(p.shape[0], 1) if by_row else torch.zeros_like(p)
        return state

    def _row_moment(self, p: torch.Tensor, group: dict[str, Any]) -> bool:
        """Whether ``p`` keeps (or, without a state yet, will keep) one second moment per row."""
        state = self.state[p]
        if state:
            return state["exp_avg_sq"].shape != p.shape
        return group.get("second_moment", "entry") == "row" and p.dim() >= 2

    def _sparse_step(self, p: torch.Tensor, group: dict[str, Any], grad: torch.Tensor | None = None) -> None:
        u = self._row_update(p, group)
        grad = (p.grad if grad is None else grad).coalesce()
        rows, values = grad.indices()[0], grad.values()
        m, v, b1, b2, wd = u.exp_avg, u.exp_avg_sq, u.beta1, u.beta2, u.weight_decay
        if _native_rows(p, m, v, values):
            # one pass over the touched rows instead of six torch ops (the optimizer step was
            # about a third of a text model's training step)
            adam_rows(p, m, v, rows, values, lr_t=u.lr_t, beta1=b1, beta2=b2, eps=u.eps, weight_decay=wd,
                      bias_correction2=u.bias_correction2, threads=torch.get_num_threads())
            return
        # index_select / index_copy_: a coalesced gradient has each row once, and these are
        # several times faster than advanced indexing on the CPU.
        if wd:
            values = values + wd * p[rows]
        # in the parameter's dtype (float32) even where the moment is stored in bfloat16, as the
        # C update does
        m_rows = m.index_select(0, rows).to(values.dtype).mul_(b1).add_(values, alpha=1 - b1)
        if v.shape != p.shape:  # one value per row: the mean of its squared entries, broadcast over the row
            squares = values.reshape(values.shape[0], -1).pow(2).mean(1, keepdim=True)
            v_rows = v.index_select(0, rows).mul_(b2).add_(squares, alpha=1 - b2)
            v.index_copy_(0, rows, v_rows)
            v_rows = v_rows.reshape(-1, *([1] * (values.dim() - 1)))
        else:
            v_rows = v.index_select(0, rows).mul_(b2).addcmul_(values, values, value=1 - b2)
            v.index_copy_(0, rows, v_rows)
        m.index_copy_(0, rows, m_rows.to(m.dtype))
        denom = v_rows.div_(u.bias_correction2).sqrt_().add_(u.eps)
        p.index_add_(0, rows, m_rows.div_(denom), alpha=-u.lr_t)

    def _dense_step(self, params: list[torch.Tensor], group: dict[str, Any], lr: float, b1: float, b2: float,
                    eps: float, wd: float) -> None:
        # Adam's update in public tensor operations. Only the text model's small dense
        # parameters (biases, the class-text match weights) come here; a dense model gets
        # torch.optim.Adam itself.
        for p in params:
            state = self._state(p, {**group, "second_moment": "entry"})  # dense gradients: per entry
            state["step"] += 1
            step = float(state["step"])
            grad = p.grad if not wd else p.grad.add(p, alpha=wd)
            stored, v = state["exp_avg"], state["exp_avg_sq"]
            m = stored if stored.dtype == p.dtype else stored.to(p.dtype)  # a bfloat16 moment: float32 arithmetic
            m.mul_(b1).add_(grad, alpha=1 - b1)
            if m is not stored:
                stored.copy_(m)
            v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
            denom = (v / (1 - b2**step)).sqrt_().add_(eps)
            p.addcdiv_(m, denom, value=-lr / (1 - b1**step))
