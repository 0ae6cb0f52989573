"""The optional C kernel (``_path_step.c``) of one fused path-local training step, and of Adam
on the rows a sparse gradient touches; loaded with ctypes.

:class:`PathLocalStep` computes, for a sparse batch, a hidden layer ``h = X W_in + b_in`` (or,
with ``relu``, ``h = max(X W_in + b_in, 0)``),
``score(b, c) = h_b . W_out[c] + b_out[c]``, the exact path-local sibling loss over the groups
on each labelled path (:func:`~hiclass_parallel.ops.sibling_paths.path_rows`) plus the weighted
in-batch level term (:func:`~hiclass_parallel.losses.in_batch_level_loss`), and every gradient,
in one call: forward, backward and the coalesced sparse gradients (distinct rows, ascending).
It is the reference-checked fast route of ``PathLocalCrossEntropy`` over ``SparseMLP``; the
torch route stays the reference (``tests/estimators/networks/engines/test_fused_step.py``). With ``sample``,
groups wider than a limit train on a sampled softmax instead (the classifier's
``softmax_sample``; ``tests/estimators/networks/engines/test_sampled_softmax.py``). :func:`adam_rows` is
``LazyAdam``'s sparse update in one pass over the touched rows.

``HICLASS_PARALLEL_NATIVE=0`` turns it off with the other kernels. ctypes releases the GIL during
each call; the kernel runs its own threads (as many as asked), started and joined per phase, so
nothing spins between steps.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...ops.engine._native import load_library
from ...ops.sibling_paths import SiblingPlan

__all__ = ["ClassText", "PathLocalStep", "RowUpdate", "StepPlan", "StepResult", "adam_rows", "available",
           "rows_merge"]

_MODULE = "hiclass_parallel.estimators.networks._path_step_c"
#: What ``ps_prepare`` counts, in its order (``PathLocalStep.last_counts``, for the roofline).
_COUNTS = ("columns", "features", "pairs", "path_rows", "level_rows", "nonzeros", "dense_columns")
_p, _i, _f = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float


def _lib(names: tuple[str, ...], restype: Any, argtypes: tuple) -> Any:
    return load_library(_MODULE, names, restype, argtypes)


def _new() -> Any:
    return _lib(("ps_new",), _p, (_i, _i, _i))


def _free() -> Any:
    return _lib(("ps_free",), None, (_p,))


def _prepare() -> Any:
    return _lib(("ps_prepare",), _i, (_p, _i, _p, _p, _p, _p, _i, _p, _p, _p, _p, _p, _p, _i, _i, _p))


def _forward() -> Any:
    return _lib(("ps_forward",), _i, (_p, _i, _p, _p, _p, _i, _p, _p, _p, _p, _p, _p, _i))


def _backward() -> Any:
    return _lib(("ps_backward",), _i, (_p, _i, _i, _p, _p, _f, _p, _p, _p, _p, _p, _p, _p, _i))


def _finish() -> Any:
    return _lib(("ps_finish",), _i, (_p, _i, _p, _p, _i, _p, _p, _p, _p, _p, _p, _p) + (_p, _p, _p, _p, _i) * 2
                + (_i,))


def _text_scores() -> Any:
    return _lib(("ps_text_scores",), _i, (_p, _i, _p, _p, _p, _p, _i, _p, _p, _p, _p, _p))


def _text_grad() -> Any:
    return _lib(("ps_text_grad",), _i, (_p, _i, _p, _p, _p, _p, _i, _p))


def _sampling() -> Any:
    return _lib(("ps_sampling",), None, (_p, _i, _i, _i))


def _sampled() -> Any:
    return _lib(("ps_sampled",), None, (_p, _p, _p, _p, _p, _p))


def _merge() -> Any:
    return _lib(("rows_merge",), _i, (_i, _p, _p, _p, _i, _f, _p, _p))


def _check(rc: int) -> None:
    if rc != 0:
        raise MemoryError("the fused step ran out of memory")


def _adam() -> Any:
    return _lib(("adam_rows",), None, (_p, _p, _p, _p, _p, _i, _i, _f, _f, _f, _f, _f, _f, _i, _i))


def available() -> bool:
    """Whether the kernel was built and may be used (``HICLASS_PARALLEL_NATIVE`` not ``0``)."""
    return _new() is not None


def _ptr(t: torch.Tensor | np.ndarray | None) -> int | None:
    if t is None:
        return None  # NULL
    return t.ctypes.data if isinstance(t, np.ndarray) else t.data_ptr()


@dataclass(frozen=True)
class RowUpdate:
    """One Adam step of a parameter's touched rows, as ``LazyAdam`` takes it: the moments and
    the step's numbers (``lr_t = lr / (1 - beta1**step)``, ``bias_correction2 = 1 -
    beta2**step``). Whether ``exp_avg_sq`` holds one value per row follows from its size
    (:func:`_row_moment`), and whether ``exp_avg`` is kept in bfloat16 from its dtype
    (:func:`_adam_form`)."""

    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    lr_t: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    bias_correction2: float

    def hyper(self) -> np.ndarray:
        """The six numbers in the kernel's order (float32; keep it alive during the call)."""
        return np.array([self.lr_t, self.beta1, self.beta2, self.eps, self.weight_decay, self.bias_correction2],
                        dtype=np.float32)


@dataclass(frozen=True)
class ClassText:
    """The class-text match of ``SparseMLP``: ``vocabulary_position (F,)`` each input feature's
    position in the class vocabulary (or -1); the columns' texts over that vocabulary as CSR
    parts ``text_ptr (n_outputs + 1,)``, ``text_idx``, ``text_val``; ``weight (V,)`` the match
    weights, already scaled (``class_feature_scale * match_weight``). int64 / float32, CPU."""

    vocabulary_position: torch.Tensor
    text_ptr: torch.Tensor
    text_idx: torch.Tensor
    text_val: torch.Tensor
    weight: torch.Tensor


@dataclass(frozen=True)
class StepResult:
    """What one fused step computed.

    Attributes
    ----------
    loss : float
        ``path + level_weight * level`` (NaN if a score was not finite).
    path_loss, level_loss : float
        Mean over the path rows; mean over the level rows (without ``level_weight``); both
        weighted by the sample weights, when given.
    hidden : torch.Tensor of shape (B, H)
    input_rows, input_grad : torch.Tensor of shape (NF,) and (NF, H)
        The distinct input features of the batch (ascending) and ``d loss / d W_in`` on them.
        ``input_grad`` and ``output_grad`` are views of the workspace's buffers, overwritten by
        the next step (copy them to keep them); ``None`` when the step updated ``W_in`` and
        ``W_out`` itself (``update``).
    input_bias_grad : torch.Tensor of shape (H,)
    output_rows, output_grad, output_bias_grad : torch.Tensor of shape (U,), (U, H), (U,)
        The distinct score columns the loss read (ascending) and the gradients of their rows.
    text_grad : torch.Tensor of shape (V,) or None
        With class text: ``d loss / d weight`` of the scaled match weights.
    """

    loss: float
    path_loss: float
    level_loss: float
    hidden: torch.Tensor
    input_rows: torch.Tensor
    input_grad: torch.Tensor | None
    input_bias_grad: torch.Tensor
    output_rows: torch.Tensor
    output_grad: torch.Tensor | None
    output_bias_grad: torch.Tensor
    text_grad: torch.Tensor | None = None


class StepPlan:
    """A batch's step planned in a workspace of a :class:`PathLocalStep` and not yet run
    (:meth:`PathLocalStep.prepare`). The step's call runs it and frees the workspace;
    :meth:`release` frees it unrun. A plan is run only for the very objects it was planned
    from (``X``, ``target``, ``sample_weight``), with the same options, in the process that
    planned it."""

    __slots__ = ("step", "handle", "pid", "sources", "crow", "col", "val", "stop_rows", "level", "sizes", "sample")

    def __init__(self, step: PathLocalStep, handle: int, pid: int, sources: tuple, crow: torch.Tensor,
                 col: torch.Tensor, val: torch.Tensor, stop_rows: bool, level: bool, sizes: np.ndarray,
                 sample: tuple[int, int, int] | None):
        self.step, self.handle, self.pid, self.sources = step, handle, pid, sources
        self.crow, self.col, self.val = crow, col, val  # what the kernel read, kept for the run
        self.stop_rows, self.level, self.sizes, self.sample = stop_rows, level, sizes, sample

    def matches(self, step: PathLocalStep, X: Any, target: Any, sample_weight: Any, stop_rows: bool,
                level: bool, sample: tuple[int, int, int] | None = None) -> bool:
        """Whether this plan is the step of ``(X, target, sample_weight)`` in ``step`` with
        these options."""
        return (self.handle is not None and step is self.step and self.pid == os.getpid()
                and all(a is b for a, b in zip(self.sources, (X, target, sample_weight)))
                and self.stop_rows == (bool(stop_rows) and step.plan.stop) and self.level == bool(level)
                and self.sample == sample)

    def release(self) -> None:
        """Free the workspace (once; later calls do nothing)."""
        handle, self.handle = self.handle, None
        if handle is not None:
            self.step._checkin(handle, self.pid)


class PathLocalStep:
    """The fused step's workspace for one ``(plan, n_features)``: marks sized to the columns,
    classes and features, kept between steps so a step costs what its batch touches.

    Parameters
    ----------
    plan : SiblingPlan
        The sibling groups (with or without stop columns).
    n_features : int
        Rows of ``W_in``.

    Attributes
    ----------
    last_counts : dict
        The last step's sizes: distinct ``columns`` and input ``features``, softmax ``pairs``,
        ``path_rows``, ``level_rows``, input ``nonzeros``, ``dense_columns`` (the block scored
        through BLAS), ``batch`` and ``width`` (what ``benchmarks/bench_roofline.py`` counts).
    widest_group : int
        Columns of the plan's widest sibling group (whether a ``sample`` setting samples any).
    last_sample : dict or None
        What the last step with ``sample`` drew: ``{group: (columns, corrections)}``, the
        candidate columns of each sampled group (in the group's order) and the correction added
        to each one's logit (0 for the batch's own targets); ``None`` after a step without.
    """

    def __init__(self, plan: SiblingPlan, n_features: int):
        if not available():
            raise RuntimeError("the fused path-local step's C kernel was not built (or HICLASS_PARALLEL_NATIVE=0)")
        self.plan = plan
        self.n_features = int(n_features)
        self._free = _free().ps_free  # held: at interpreter exit the module's globals may be gone
        # The C workspaces (ps_new handles): one per step planned and not yet run, so a batch
        # can be planned in one while the step before it runs in another; made as needed.
        self._handles: list[int] = []
        self._idle: list[int] = []
        self._pool_lock = threading.Lock()  # guards the two lists
        self._idle.append(self._checkout())  # allocated now: a failure is this constructor's
        self.widest_group = int(np.diff(plan.group_ptr).max()) if plan.n_groups else 0
        self.last_sample: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None
        self._lock = threading.Lock()  # one step runs at a time (the reused gradient buffers)
        _STEPS.add(self)
        self._buffers: dict[str, torch.Tensor] = {}
        # host copies of the plan, contiguous int64 (the plan's arrays are read-only views)
        self._arrays = {name: np.ascontiguousarray(getattr(plan, name), dtype=np.int64)
                        for name in ("paths", "group_of", "child_group", "group_ptr", "group_cols", "col_pos")}

    def _reused(self, name: str, rows: int, width: int) -> torch.Tensor:
        # The row gradients of a step are tens of megabytes at WordNet's scale; a fresh
        # allocation each step is fresh pages each step, and the page faults took as long as
        # the rest of the backward pass. So they live in grow-only buffers,
        # valid until the next step, as torch's accumulated .grad buffers are.
        need = rows * width
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < need:
            buf = self._buffers[name] = torch.empty(max(need, 1) * 3 // 2 + 1, dtype=torch.float32)
        return buf[:need].view(rows, width)

    def __del__(self) -> None:
        handles, self._handles = getattr(self, "_handles", []), []
        for handle in handles:
            self._free(handle)

    def _checkout(self) -> int:
        """An idle C workspace, or a new one."""
        with self._pool_lock:
            if self._idle:
                return self._idle.pop()
        handle = _new().ps_new(self.plan.n_classes, self.plan.n_outputs, self.n_features)
        if not handle:
            raise MemoryError("could not allocate the fused step's workspace")
        with self._pool_lock:
            self._handles.append(handle)
        return handle

    def _checkin(self, handle: int, pid: int) -> None:
        """A workspace back to the idle ones (one of another process's: dropped, see _after_fork)."""
        if pid != os.getpid():
            return
        with self._pool_lock:
            self._idle.append(handle)

    def _after_fork(self) -> None:
        # In a forked child the threads that held these locks or were planning in a workspace
        # do not exist: fresh locks, and only the workspaces idle at the fork are used again
        # (one being planned in may be half-written; it is left allocated, never read).
        self._pool_lock, self._lock = threading.Lock(), threading.Lock()
        self._handles = list(self._idle)

    def prepare(self, X: torch.Tensor, target: torch.Tensor, *, stop_rows: bool, level: bool,
                sample_weight: torch.Tensor | None = None, sample: tuple[int, int, int] | None = None) -> StepPlan:
        """Plan the step of a batch (``ps_prepare``: the softmax rows on each labelled path, the
        distinct columns and input features, the batch's columns by feature) in a workspace of
        its own, without running it: the call with ``plan=`` runs it. Arguments as the call's
        (``level``: whether the in-batch level term is on, ``level_weight > 0``); the errors
        of a bad batch (target ids or feature indices out of range, a ``sample_weight`` of
        another shape) are raised here. Thread-safe, and ctypes releases the GIL while the
        kernel plans, so a batch can be planned on another thread while a step runs."""
        crow = X.crow_indices().to(torch.int64).contiguous()
        col = X.col_indices().to(torch.int64).contiguous()
        val = X.values().to(torch.float32).contiguous()
        ids = target.to(torch.int64).contiguous()
        B = int(X.shape[0])
        weight = None
        if sample_weight is not None:
            weight = torch.as_tensor(sample_weight).to(device="cpu", dtype=torch.float32).contiguous()
            if weight.shape != (B,):
                raise ValueError(f"sample_weight has shape {tuple(weight.shape)}; expected one weight per sample "
                                 f"({B},)")
        a = self._arrays
        sizes = np.zeros(7, dtype=np.int64)
        stop = bool(stop_rows) and self.plan.stop
        pid, handle = os.getpid(), self._checkout()
        try:
            # the sampled softmax of wide groups (off: every softmax exact), set on this workspace
            _sampling().ps_sampling(handle, *(int(v) for v in (sample or (0, 0, 0))))
            rc = _prepare().ps_prepare(
                handle, B, _ptr(ids), _ptr(weight), _ptr(crow), _ptr(col), self.plan.n_levels, _ptr(a["paths"]),
                _ptr(a["group_of"]), _ptr(a["child_group"]), _ptr(a["group_ptr"]), _ptr(a["group_cols"]),
                _ptr(a["col_pos"]), int(stop), int(bool(level)), _ptr(sizes),
            )
        except BaseException:
            self._checkin(handle, pid)
            raise
        if rc != 0:
            if rc != -1:  # out of memory: the workspace's marks may be left set; it is not used again
                self._checkin(handle, pid)
            if rc == -2:
                bad = ids[(ids < -1) | (ids >= self.plan.n_classes)]
                raise IndexError(f"target ids {sorted(set(bad.tolist()))[:5]} are out of range "
                                 f"[0, {self.plan.n_classes}) (-1: unlabelled)")
            if rc == -3:
                raise IndexError(f"X has a column index outside [0, {self.n_features})")
            _check(rc)
        return StepPlan(self, handle, pid, (X, target, sample_weight), crow, col, val, stop, bool(level), sizes,
                        sample)

    def __call__(
        self, X: torch.Tensor, target: torch.Tensor, W_in: torch.Tensor, b_in: torch.Tensor, W_out: torch.Tensor,
        b_out: torch.Tensor, *, stop_rows: bool, level_weight: float, threads: int,
        update: tuple[RowUpdate, RowUpdate] | None = None, text: ClassText | None = None,
        sample_weight: torch.Tensor | None = None, plan: StepPlan | None = None,
        sample: tuple[int, int, int] | None = None, relu: bool = False,
    ) -> StepResult:
        """One step on a torch sparse CSR float32 batch ``X (B, F)`` and node ids ``target (B,)``
        (``-1``: unlabelled). Weights are float32, C-contiguous, on the CPU; ``b_out`` has
        ``n_outputs`` entries. ``stop_rows``: terminal semantics with stop columns.
        ``level_weight > 0`` adds the in-batch level term.

        ``sample_weight``: ``(B,)`` finite non-negative weights of the samples (``None``: all 1).
        Each softmax row's loss and gradient is multiplied by its sample's weight and each term's
        mean divides by its rows' total weight, as ``PathLocalCrossEntropy`` with
        ``sample_weight``; a zero-weight sample counts as unlabelled.

        ``update``: Adam's steps of ``W_in`` and ``W_out`` (in that order): the step then
        updates their touched rows in place, each as soon as its gradient is complete and
        while it is still in cache, and returns no gradient for them (``input_grad`` and
        ``output_grad`` are ``None``); the biases' gradients are returned as always. The
        weights are the same as after :func:`adam_rows` on the returned gradients.

        ``text``: add the class-text match to every score (:class:`ClassText`); its gradient
        comes back as ``text_grad``.

        ``plan``: the batch's step planned ahead (:meth:`prepare`, with these very ``X``,
        ``target`` and ``sample_weight`` objects, ``stop_rows`` and ``level_weight > 0``); a plan
        of anything else is released and the step plans itself. The plan's workspace is freed
        when the step ends, run or not.

        ``sample``: ``(above, size, seed)``, the sampled softmax of wide groups (``None``: every
        softmax exact). Each used group wider than ``above`` columns is scored, for the whole
        batch, on ``size`` candidates: the columns that are targets of the batch's rows in it,
        and others drawn uniformly without replacement (seeded by ``seed``), whose logits get
        ``log(1 / Q)`` added, ``Q`` their chance of being drawn (the sampled-softmax correction of
        the normaliser). A sample that covers the group is its exact softmax. What was drawn:
        ``last_sample``. :meth:`prepare` takes the same argument.

        ``relu``: the hidden layer is ``max(X W_in + b_in, 0)`` (``SparseMLP(activation=nn.ReLU)``),
        and the hidden gradient is masked by the activated rows ``> 0`` (torch's ReLU backward)
        before the input layer's gradient; ``False``: linear."""
        level = level_weight > 0
        if plan is not None and not plan.matches(self, X, target, sample_weight, stop_rows, level, sample):
            plan.release()
            plan = None
        if plan is None:
            plan = self.prepare(X, target, stop_rows=stop_rows, level=level, sample_weight=sample_weight, sample=sample)
        try:
            with self._lock:
                result = self._run(plan, W_in, b_in, W_out, b_out, level_weight, max(1, int(threads)), update, text,
                                   bool(relu))
                self.last_sample = _read_sample(plan.handle) if plan.sample else None
                return result
        finally:
            plan.release()

    def _run(self, plan: StepPlan, W_in: torch.Tensor, b_in: torch.Tensor, W_out: torch.Tensor, b_out: torch.Tensor,
             level_weight: float, T: int, update: tuple[RowUpdate, RowUpdate] | None,
             text: ClassText | None, relu: bool = False) -> StepResult:
        """The planned step: forward, backward and the gradients (or the update) in ``plan``'s
        workspace."""
        handle, crow, col, val, sizes = plan.handle, plan.crow, plan.col, plan.val, plan.sizes
        B, H = int(crow.shape[0]) - 1, int(W_in.shape[1])
        f32 = {"dtype": torch.float32}
        U, NF, D = int(sizes[0]), int(sizes[1]), int(sizes[6])
        self.last_counts = dict(zip(_COUNTS, (int(v) for v in sizes)), batch=B, width=H)
        hidden, dense_cols = torch.empty(B, H, **f32), torch.empty(D, dtype=torch.int64)
        _check(_forward().ps_forward(handle, T, _ptr(crow), _ptr(col), _ptr(val), H, _ptr(W_in), _ptr(b_in),
                                     _ptr(W_out), _ptr(b_out), _ptr(hidden), _ptr(dense_cols), int(relu)))
        # The columns most rows need (the upper groups) as one dense block, through BLAS.
        W_dense = W_out.index_select(0, dense_cols)
        S = torch.addmm(b_out.index_select(0, dense_cols), hidden, W_dense.t())
        if text is not None:
            t = _text_args(text, self.n_features, self.plan.n_outputs)
            _check(_text_scores().ps_text_scores(handle, T, _ptr(crow), _ptr(col), _ptr(val), _ptr(t[0]),
                                                 int(t[4].shape[0]), *(_ptr(a) for a in t[1:]), _ptr(S)))
        G = torch.empty(B, D, **f32)
        output_grad = None if update else self._reused("output", U, H)
        output_bias = torch.empty(U, **f32)
        loss = np.zeros(3, dtype=np.float64)
        up_in, up_out, _hyper = _update_args(update, W_in, W_out)  # _hyper: alive through the calls
        _check(_backward().ps_backward(handle, T, H, _ptr(W_out), _ptr(S), float(level_weight), _ptr(G),
                                       _ptr(output_grad), _ptr(output_bias), _ptr(loss), *up_out[1:]))
        text_grad = None
        if text is not None:
            text_grad = torch.empty(t[4].shape[0], **f32)
            _check(_text_grad().ps_text_grad(handle, T, *(_ptr(a) for a in t[1:]), int(t[4].shape[0]),
                                             _ptr(text_grad)))
        dh_dense, dW_dense = G @ W_dense, G.t() @ hidden
        input_grad = None if update else self._reused("input", NF, H)
        input_bias = torch.empty(H, **f32)
        input_rows, output_rows = torch.empty(NF, dtype=torch.int64), torch.empty(U, dtype=torch.int64)
        _check(_finish().ps_finish(handle, T, _ptr(crow), _ptr(val), H, _ptr(dh_dense), _ptr(dW_dense),
                                   _ptr(input_grad), _ptr(input_bias), _ptr(output_grad), _ptr(input_rows),
                                   _ptr(output_rows), *up_in, *up_out, int(relu)))
        return StepResult(float(loss[0]), float(loss[1]), float(loss[2]), hidden, input_rows, input_grad,
                          input_bias, output_rows, output_grad, output_bias, text_grad)


def _read_sample(handle: int) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """What a workspace's last plan sampled: ``{group: (columns, corrections)}``."""
    sizes = np.zeros(2, dtype=np.int64)
    _sampled().ps_sampled(handle, _ptr(sizes), None, None, None, None)
    n, total = int(sizes[0]), int(sizes[1])
    groups, ptr = np.zeros(n, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)
    cols, off = torch.zeros(total, dtype=torch.int64), torch.zeros(total, dtype=torch.float32)
    _sampled().ps_sampled(handle, _ptr(sizes), _ptr(groups), _ptr(ptr), _ptr(cols), _ptr(off))
    return {int(g): (cols[ptr[i]:ptr[i + 1]], off[ptr[i]:ptr[i + 1]]) for i, g in enumerate(groups)}


#: The live steps, whose locks and workspaces a forked child renews (:meth:`PathLocalStep._after_fork`).
_STEPS: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for step in list(_STEPS):
        step._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _text_args(text: ClassText, n_features: int, n_outputs: int) -> tuple[torch.Tensor, ...]:
    """The class text's arrays, contiguous and typed for the kernel, their sizes checked."""
    vpos = text.vocabulary_position.to(torch.int64).contiguous()
    ptr = text.text_ptr.to(torch.int64).contiguous()
    idx = text.text_idx.to(torch.int64).contiguous()
    val = text.text_val.to(torch.float32).contiguous()
    weight = text.weight.detach().to(torch.float32).contiguous()
    V = int(weight.shape[0])
    if vpos.shape != (n_features,) or ptr.shape != (n_outputs + 1,) or idx.shape != val.shape \
            or int(ptr[-1]) != idx.shape[0] or (idx.numel() and not (0 <= int(idx.min()) and int(idx.max()) < V)) \
            or (vpos.numel() and int(vpos.max()) >= V):
        raise ValueError(f"the class text does not fit the step: {n_features} features, {n_outputs} columns, "
                         f"{V} vocabulary weights")
    return vpos, ptr, idx, val, weight


def _row_moment(param: torch.Tensor, exp_avg_sq: torch.Tensor) -> bool:
    """Whether ``exp_avg_sq`` is a row-wise second moment of ``param`` (one value per row; a
    parameter of one value per row counts as row-wise), as the kernel's ``ADAM_ROW_V`` wants it."""
    width = int(param[0].numel()) if param.shape[0] else 0
    return exp_avg_sq.numel() != param.numel() or width == 1


#: The kernel's flags of a row update's form (``_path_step.c``): a row-wise second moment, a
#: bfloat16 first moment.
_ADAM_ROW_V, _ADAM_M_BF16 = 1, 2
#: The dtypes of a first moment the kernel's row update takes (the second moment: float32).
FIRST_MOMENT_DTYPES = (torch.float32, torch.bfloat16)


def _adam_form(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor) -> int:
    """The kernel's ``form`` of an Adam state: its moments' kinds, checked against ``param``."""
    if exp_avg.dtype not in FIRST_MOMENT_DTYPES or exp_avg_sq.dtype != torch.float32 \
            or any(t.device.type != "cpu" or not t.is_contiguous() for t in (exp_avg, exp_avg_sq)):
        raise ValueError("the C row update needs contiguous CPU moments: the first float32 or bfloat16, the second "
                         f"float32 (got {exp_avg.dtype} and {exp_avg_sq.dtype})")
    row_v = _row_moment(param, exp_avg_sq)
    if exp_avg.shape != param.shape or exp_avg_sq.numel() != (param.shape[0] if row_v else param.numel()):
        raise ValueError(f"the moments of a {tuple(param.shape)} parameter do not match it: exp_avg "
                         f"{tuple(exp_avg.shape)}, exp_avg_sq {tuple(exp_avg_sq.shape)} (its shape or one value per row)")
    return (_ADAM_ROW_V if row_v else 0) | (_ADAM_M_BF16 if exp_avg.dtype == torch.bfloat16 else 0)


def _update_args(update: tuple[RowUpdate, RowUpdate] | None, W_in: torch.Tensor, W_out: torch.Tensor) -> tuple:
    """The kernel's (weights, m, v, hyper, form) of W_in and of W_out (NULLs without an update),
    and the hyper arrays the pointers point into."""
    if update is None:
        return (None, None, None, None, 0), (None, None, None, None, 0), ()
    forms = [_adam_form(param, rows.exp_avg, rows.exp_avg_sq) for rows, param in zip(update, (W_in, W_out))]
    hyper = tuple(u.hyper() for u in update)
    args = tuple((_ptr(p), _ptr(u.exp_avg), _ptr(u.exp_avg_sq), _ptr(h), form)
                 for u, p, h, form in zip(update, (W_in, W_out), hyper, forms))
    return args[0], args[1], hyper


def adam_rows(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, rows: torch.Tensor,
              grad: torch.Tensor, *, lr_t: float, beta1: float, beta2: float, eps: float, weight_decay: float,
              bias_correction2: float, threads: int) -> None:
    """Adam on ``rows`` (distinct) of a float32 C-contiguous CPU ``param`` and its moments, in
    place: ``grad (len(rows), ...)``; ``lr_t = lr / (1 - beta1**step)``,
    ``bias_correction2 = 1 - beta2**step``. ``exp_avg_sq`` of one value per row of ``param``
    (shape ``(n_rows, 1)``) is a row-wise second moment: the mean of each row's squared gradient.
    ``exp_avg`` may be bfloat16: the update computes in float32 and stores it rounded to the
    nearest bfloat16."""
    width = int(param[0].numel()) if param.shape[0] else 0
    rows = rows.to(torch.int64).contiguous()
    grad = grad.to(torch.float32).contiguous()
    form = _adam_form(param, exp_avg, exp_avg_sq)
    _adam().adam_rows(_ptr(param), _ptr(exp_avg), _ptr(exp_avg_sq), _ptr(rows), _ptr(grad), int(rows.shape[0]),
                      width, lr_t, beta1, beta2, eps, weight_decay, bias_correction2, max(1, int(threads)), form)


def rows_merge(keys: list[torch.Tensor], values: list[torch.Tensor], divisor: float = 1.0,
               out: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The union of sorted lists of distinct int64 ``keys`` (one per rank) and, for each key of
    the union, the sum of its ``values`` rows (float32, ``(len(keys[r]), ...)`` each) over the
    lists that hold it, added in list order, divided by ``divisor``: ``(union keys, rows)``, the
    keys ascending. The data-parallel callback's mean of the ranks' sparse gradients, in one
    pass. ``out``: flat int64 and float32 buffers to write into (at least the total count of
    keys, and of value entries), reused between steps; the results are views of them."""
    if len(keys) != len(values) or not keys:
        raise ValueError(f"rows_merge needs as many value blocks as key lists, got {len(keys)} and {len(values)}")
    tail = tuple(values[0].shape[1:])
    width = math.prod(tail)
    keys = [k.to(torch.int64).contiguous() for k in keys]
    values = [v.to(torch.float32).contiguous() for v in values]
    for k, v in zip(keys, values):
        if k.dim() != 1 or v.shape != (k.shape[0], *tail) or k.device.type != "cpu" or v.device.type != "cpu":
            raise ValueError(f"rows_merge: keys {tuple(k.shape)} and values {tuple(v.shape)} do not match "
                             f"(rows of shape {tail}, on the CPU)")
    counts = np.array([k.shape[0] for k in keys], dtype=np.int64)
    total = int(counts.sum())
    if out is None:
        out = torch.empty(total, dtype=torch.int64), torch.empty(total * width, dtype=torch.float32)
    out_keys, out_values = out
    if out_keys.dtype != torch.int64 or out_values.dtype != torch.float32 or out_keys.numel() < total \
            or out_values.numel() < total * width or not (out_keys.is_contiguous() and out_values.is_contiguous()):
        raise ValueError(f"rows_merge: the out buffers hold {out_keys.numel()} keys and {out_values.numel()} values; "
                         f"{total} and {total * width} are needed (int64 and float32, contiguous)")
    key_ptrs = (ctypes.c_void_p * len(keys))(*(_ptr(k) for k in keys))
    value_ptrs = (ctypes.c_void_p * len(values))(*(_ptr(v) for v in values))
    n = _merge().rows_merge(len(keys), _ptr(counts), key_ptrs, value_ptrs, width, float(divisor), _ptr(out_keys),
                            _ptr(out_values))
    if n < 0:
        raise ValueError(f"rows_merge takes 1 to 64 lists, got {len(keys)}")
    return out_keys[:n], out_values[:n * width].view(n, *tail)
