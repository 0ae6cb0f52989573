#!/usr/bin/env bash
# The CUDA / CuPy checks, in one command, for a machine with an NVIDIA GPU.
#
# Development and CI machines have no GPU, so the CUDA and CuPy code paths only run here:
# the whole test suite (GPU tests included), then both benchmarks on the GPU. Logs and JSON
# go to $OUT (default: gpu-out/).
#
#   bash scripts/gpu_check.sh            # everything
#   bash scripts/gpu_check.sh gpu-tests  # only the tests that use CUDA, CuPy or the device step (a minute)
#   bash scripts/gpu_check.sh tests      # only the test suite
#   bash scripts/gpu_check.sh text       # only the text route end to end (all nouns, full tree)
#   bash scripts/gpu_check.sh bench      # only the engine benchmarks
#   bash scripts/gpu_check.sh device     # the device training step: its tests compiled on CUDA, the text
#                                        # route on person, all nouns and the full tree against the CPU on the
#                                        # same split, one profiled epoch each, the CPU fit at 1-16 threads
#                                        # beside XR-Linear (where .pecos/ holds libpecos and NumPy 1.26 wheels)
#
# Wheels in .whl/ (for an offline machine without skorch / array-api-compat) are installed
# into /tmp/site first.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
what=${1:-all}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

if compgen -G ".whl/*.whl" >/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
$PY - <<'EOF' | tee -a "$OUT/device.txt"
import numpy, sklearn, torch, skorch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name())
print("numpy", numpy.__version__, "scikit-learn", sklearn.__version__, "skorch", skorch.__version__)
try:
    import cupy
    print("cupy", cupy.__version__)
except ImportError as exc:
    print("cupy missing:", exc)
EOF

# The optional C kernels (CPU search and training step), built for this machine's Python.
$PY setup.py build_ext --inplace -q >"$OUT/build.log" 2>&1 || echo "C kernels not built (see $OUT/build.log); CPU fallbacks run"

status=0
if [ "$what" = device ]; then
    # each part under its own time limit, so that one slow part leaves the others their time
    # (TESTS_S=0 skips the tests; GRAPH_TASKS also runs those tasks with the step replayed as a CUDA graph)
    if [ "${TESTS_S:-150}" != 0 ]; then
        timeout ${TESTS_S:-150} $PY -m pytest -p no:cacheprovider -q -rfEs tests/estimators/networks/test_device_step.py 2>&1 \
            | tee "$OUT/pytest_device_step.log" | tail -n 30
        status=$((status | ${PIPESTATUS[0]}))
    fi
    timeout ${TEXT_S:-300} $PY -m benchmarks.bench_gpu_text --tasks ${TASKS:-person,nouns,full} --cpu-threads 2 \
        --cpu-on ${CPU_ON:-person,nouns} --profile "$OUT" --out "$OUT/gpu_text.json" 2>&1 | tee "$OUT/gpu_text.log" \
        | grep -v "^   \|^-\|^Name\|^Self"
    status=$((status | ${PIPESTATUS[0]}))
    if [ -n "${GRAPH_TASKS:-}" ]; then
        HICLASS_PARALLEL_CUDA_GRAPH=1 timeout ${GRAPH_S:-200} $PY -m benchmarks.bench_gpu_text --tasks "$GRAPH_TASKS" \
            --out "$OUT/gpu_text_graph.json" 2>&1 | tee "$OUT/gpu_text_graph.log"
        status=$((status | ${PIPESTATUS[0]}))
    fi
    if [ -n "${THREADS:-}" ]; then
        if compgen -G ".pecos/*.whl" >/dev/null; then
            $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/pecos .pecos/*.whl
            printf '#!/bin/sh\nPYTHONPATH=/tmp/pecos exec %s "$@"\n' "$(command -v $PY)" >/tmp/pecos_python
            chmod +x /tmp/pecos_python
            export PECOS_PYTHON=/tmp/pecos_python
        fi
        timeout ${THREADS_S:-200} $PY -m benchmarks.bench_cpu_threads --subset nouns --threads "$THREADS" \
            --out "$OUT/cpu_threads.json" 2>&1 | tee "$OUT/cpu_threads.log"
        status=$((status | ${PIPESTATUS[0]}))
    fi
fi
if [ "$what" = gpu-tests ]; then
    $PY -m pytest -p no:cacheprovider -n 8 -q -rfEs -k "cuda or cupy or gpu or triton or device_step" 2>&1 | tee "$OUT/pytest_gpu.log" | tail -n 40
    status=$((status | ${PIPESTATUS[0]}))
fi
if [ "$what" = all ] || [ "$what" = text ]; then
    $PY -m benchmarks.bench_gpu_text --tasks nouns,full,person --cpu-threads 2 --out "$OUT/gpu_text.json" 2>&1 | tee "$OUT/gpu_text.log"
    status=$((status | ${PIPESTATUS[0]}))
fi
if [ "$what" = all ] || [ "$what" = tests ]; then
    # -p no:cacheprovider: the checkout may be read-only; -n 8: 16 cores, leave room for CUDA.
    $PY -m pytest -p no:cacheprovider -n 8 -q -rs 2>&1 | tee "$OUT/pytest.log" | tail -n 60
    status=$((status | ${PIPESTATUS[0]}))
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
    $PY -m benchmarks.bench_paper_table --backends torch-cuda,cupy-cuda --json "$OUT/paper_table_cuda.json" 2>&1 | tee "$OUT/paper_table_cuda.txt"
    status=$((status | ${PIPESTATUS[0]}))
    $PY -m benchmarks.bench_engine --device cuda --json "$OUT/engine_cuda.json" 2>&1 | tee "$OUT/engine_cuda.txt"
    status=$((status | ${PIPESTATUS[0]}))
fi
exit $status
