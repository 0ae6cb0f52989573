"""Planning the next training batch while the current step runs.

A training step of the fused route first plans its batch (which softmax rows each labelled
path needs, the distinct columns and input features: ``ps_prepare`` of the C step), single
threaded, then runs it on every thread. :class:`PlanAhead` takes the planning off the step's
critical path: it wraps one epoch's training batches and, before it hands batch ``k`` to the
step, it has already fetched batch ``k + 1`` and handed it to a ``planner`` on a thread of its
own, so batch ``k + 1`` is planned while step ``k`` runs (the kernel releases the GIL). The
step asks :meth:`PlanAhead.plan_for` for its batch's plan.

It is generic: a planner is any callable ``planner(batch) -> job``, called on the training
thread in the batches' order (where it reads the batch and draws what the step would draw from
a random generator, so the draws come in the same order as when each step plans itself), whose
``job() -> plan`` runs on the planning thread; a plan is any object (one with a ``release()``
method gets it called when no step took it), so a device step with its own padded plan can use
the same loop.

What a user sees does not change:

- the same batches reach the step in the same order, each planned from the very objects the
  step gets (a step checks that, and plans itself otherwise), so the weights are the same bit
  for bit;
- a planner that fails hands over no plan: the step then plans the batch itself, on the
  training thread, and raises the error it always raised, at the same batch; an error of the
  loader while fetching batch ``k + 1`` is raised after step ``k``, where it was raised before;
- :meth:`PlanAhead.close` (the net calls it when the epoch ends, however it ends: an error,
  Ctrl-C) waits for the plan in flight, releases the plans no step took and joins the thread:
  a fit leaves nothing running;
- in a forked child (a copy of the process taken mid-epoch), the thread does not exist:
  :meth:`PlanAhead.plan_for` hands over nothing there and the steps plan themselves.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

__all__ = ["PlanAhead", "release_plan"]


def release_plan(plan: Any) -> None:
    """Release ``plan`` when it has a ``release()`` method (a C workspace, say)."""
    release = getattr(plan, "release", None)
    if callable(release):
        release()


class _Ahead:
    """A batch fetched from the loader and its plan in flight (planned in process ``pid``), or
    the loader's error."""

    __slots__ = ("batch", "future", "error", "pid")

    def __init__(self, batch: Any = None, future: Future | None = None, error: BaseException | None = None):
        self.batch, self.future, self.error, self.pid = batch, future, error, os.getpid()

    def drop(self) -> None:
        """Wait for the plan and release it (nobody took it). In a forked child the planning
        thread does not exist: nothing to wait for, and the plan is the parent's."""
        future, self.future = self.future, None
        if future is None or os.getpid() != self.pid:
            return
        try:
            plan = future.result()
        except BaseException:  # noqa: BLE001 - a failed plan holds nothing
            return
        release_plan(plan)


class PlanAhead:
    """One epoch's training batches, each next one planned on a thread while the step before it runs.

    Parameters
    ----------
    batches : iterable
        The training loader (one pass: one epoch).
    planner : callable
        ``planner(batch) -> job`` (or ``None``: no plan for this batch), called on the training
        thread when the batch is fetched, one batch ahead of the step; ``job() -> plan`` runs on
        the planning thread, in the batches' order. The job must read nothing the step changes
        (the batch, and what was fixed when the epoch began) and draw from no random generator.

    depth : int, default=1
        How many batches after the running one are fetched and planned at once, each on a
        thread of its own. More than one only for planners whose jobs draw nothing and share
        nothing (the device step's, whose planning takes longer than its step): the planner
        is still called in the batches' order, but a batch is fetched ``depth`` steps early.

    Iterating yields the batches of ``batches`` unchanged. Use it as a context manager (or call
    :meth:`close`) so that the threads end with the epoch.
    """

    def __init__(self, batches: Iterable[Any], planner: Callable[[Any], Any], depth: int = 1):
        if int(depth) < 1:
            raise ValueError(f"depth must be a positive int, got {depth!r}")
        self.batches = batches
        self.planner = planner
        self.depth = int(depth)
        self._pid = os.getpid()
        self._executor: ThreadPoolExecutor | None = None
        self._current: _Ahead | None = None  # the batch the step is running (its plan not yet taken)
        self._ahead: deque[_Ahead] = deque()  # the batches after it, being planned, in order
        self._exhausted = False  # the loader ended (or raised): fetch nothing more
        self._closed = False

    def __enter__(self) -> PlanAhead:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise RuntimeError("this PlanAhead is closed: make a new one for another pass over the batches")
        batches = iter(self.batches)
        self._fill(batches)
        while self._ahead:
            current = self._ahead.popleft()
            if current.error is not None:
                raise current.error
            self._current = current
            # The next batches are fetched and their planning started before this batch's step runs.
            self._fill(batches)
            yield current.batch
            self._current = None
            current.drop()  # its plan, if the step did not take it

    def _fill(self, batches: Iterator[Any]) -> None:
        """Fetch batches until ``depth`` wait after the running one (or the loader ends; a
        loader's error is the last batch fetched, raised when its turn comes)."""
        while len(self._ahead) < self.depth and not self._exhausted:
            ahead = self._fetch(batches)
            if ahead is None or ahead.error is not None:
                self._exhausted = True
            if ahead is not None:
                self._ahead.append(ahead)

    def _fetch(self, batches: Iterator[Any]) -> _Ahead | None:
        try:
            batch = next(batches)
        except StopIteration:
            return None
        except Exception as error:  # raised after the step of the batch before, where it always was
            return _Ahead(error=error)
        if os.getpid() != self._pid:  # a forked child: no planning thread here
            return _Ahead(batch)
        try:
            job = self.planner(batch)
        except Exception:  # noqa: BLE001 - no plan: the step plans itself and raises it there
            job = None
        if job is None:
            return _Ahead(batch)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.depth, thread_name_prefix="hiclass-plan-ahead")
        return _Ahead(batch, self._executor.submit(job))

    def plan_for(self, batch: Any) -> Any:
        """The plan of ``batch`` when it is the batch just handed out and its planning
        succeeded (waiting for it to finish), else ``None``: the step then plans the batch
        itself (and raises what planning raises). A plan is handed over once; the caller
        releases it."""
        current = self._current
        if current is None or current.batch is not batch or current.future is None or os.getpid() != self._pid:
            return None
        try:
            plan = current.future.result()  # (Ctrl-C while waiting: close() releases the plan)
        except Exception:  # noqa: BLE001 - the step plans again and raises it on its own thread
            plan = None
        current.future = None
        return plan

    def close(self) -> None:
        """Wait for the plan in flight, release the plans no step took, end the thread. Safe
        to call more than once, and in a forked child (which has no thread to wait for)."""
        self._closed = True
        pending = [a for a in (self._current, *self._ahead) if a is not None]
        self._current = None
        self._ahead.clear()
        executor, self._executor = self._executor, None
        if os.getpid() != self._pid:
            return
        for ahead in pending:
            ahead.drop()
        if executor is not None:
            executor.shutdown(wait=True)
