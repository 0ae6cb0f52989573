"""``predict`` in a child made by ``os.fork`` after the parent ran torch on several threads.

torch's OpenMP threads do not survive a fork, and such a child used to hang in its first
torch operation. The package sets torch to one thread in a forked child, so ``predict`` there
works: in a bare ``os.fork`` child and in a fork-start ``multiprocessing.Pool``. Run in a fresh
interpreter (the parent's threads must be started there), each child under an alarm, so that
a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")

_SCRIPT = r"""
import multiprocessing, os, signal
import numpy as np, torch
from hiclass_parallel.datasets import make_hierarchical_classification
from hiclass_parallel.estimators import HierarchicalClassifier

X, y, tree = make_hierarchical_classification(n_samples=1500, n_features=32, branching=3, depth=2, random_state=0)
torch.set_num_threads(2)  # the parent's OpenMP threads start: what a child inherits and cannot use
clf = HierarchicalClassifier(tree, max_epochs=1, random_state=0).fit(X, y)
want = clf.predict(X)
assert torch.get_num_threads() == 2

pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a hang ends the child with SIGALRM
    ok = (clf.predict(X) == want).all() and torch.get_num_threads() == 1
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("fork", os.waitstatus_to_exitcode(status))


def chunk(rows):
    signal.alarm(30)
    return clf.predict(X[rows])


with multiprocessing.get_context("fork").Pool(2) as pool:
    parts = pool.map_async(chunk, np.array_split(np.arange(X.shape[0]), 4)).get(timeout=60)
print("pool", int((np.concatenate(parts) == want).all()))
assert torch.get_num_threads() == 2  # the parent keeps its threads
"""


def test_predict_in_a_forked_child_works():
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["fork", "0", "pool", "1"], done.stdout + done.stderr[-3000:]
