"""Fit or predict with libpecos XR-Linear, in libpecos's own environment.

``python _pecos_job.py '{"mode": "fit"|"predict", "folder": ..., "params": {...}}'``: reads
``X_<mode>.npz`` (and ``y.npy``, node ids, for fit) from the folder, writes the model (fit) or
``pred.npy`` (predict, the top-1 node id per row), and prints ``{"seconds": ...}`` (the time
of the fit or the prediction itself, without this process's start and imports).
Only NumPy, SciPy and libpecos are imported: this package is not installed there.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp


def main() -> None:
    job = json.loads(sys.argv[1])
    folder = Path(job["folder"])
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    X = sp.load_npz(folder / f"X_{job['mode']}.npz").tocsr().astype(np.float32)
    if job["mode"] == "fit":
        y = np.load(folder / "y.npy")
        classes, col = np.unique(y, return_inverse=True)
        start = time.perf_counter()
        Y = sp.csr_matrix((np.ones(y.size, dtype=np.float32), (np.arange(y.size), col)),
                          shape=(y.size, classes.size))
        label_feat = LabelEmbeddingFactory.create(Y, X, method="pifa")
        chain = Indexer.gen(label_feat, **job["params"].get("indexer", {}))
        model = XLinearModel.train(X, Y, C=chain, **job["params"].get("train", {}))
        seconds = time.perf_counter() - start
        model.save(str(folder / "model"))
        np.save(folder / "classes.npy", classes)
    else:
        model = XLinearModel.load(str(folder / "model"))
        classes = np.load(folder / "classes.npy")
        start = time.perf_counter()
        P = model.predict(X, only_topk=1).tocsr()
        best = np.zeros(X.shape[0], dtype=np.int64)
        rows = np.repeat(np.arange(X.shape[0]), np.diff(P.indptr))
        best[rows] = P.indices  # one label per row (only_topk=1)
        seconds = time.perf_counter() - start
        np.save(folder / "pred.npy", classes[best])
    print(json.dumps({"seconds": seconds}))


if __name__ == "__main__":
    main()
