"""The engine behind :mod:`hiclass_parallel.ops`: nothing here is public API.

The public operations (``dense``, ``groups``, ``decode``, ``best_first``, ``sibling_paths``)
describe *what* is computed; the modules here decide *how*, per array library and device:

- ``_layout``: the tree arrays one partition needs, cached per device;
- ``_array_ops``, ``_backends``, ``_bucketed``: the per-library array operations and the
  backend chosen from the input (NumPy, torch, CuPy, any array-API array);
- ``_engine``: preparing scores and restoring results around a backend; ``_autograd``: the
  torch autograd functions of the lean loss;
- ``_triton``, ``_triton_kernels``: fused CUDA kernels for torch tensors (where Triton imports);
- ``_native``, ``_native_best_first``: the optional C libraries (``_segment.c``,
  ``_best_first.c``, built by ``setup.py``) loaded with ctypes, each with a fallback where the
  library was not built; ``_native.load_library`` also loads the text model's fused step
  (``estimators/networks/_path_step.c``), which lives beside the estimators it serves.
"""
