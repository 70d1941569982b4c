#!/usr/bin/env bash
# One GPU session for the CUDA backend, in two halves.
#
#   bash runtime/bench/gpu_session.sh prepare
#       Here, where cargo is: builds the release `lms` and the GPU test binaries and copies
#       them, with the ResNet-50 model (fixtures/data is git-ignored), into .gpu/
#       (git-ignored, so it travels only as carried; about 30 MB).
#
#   bash runtime/bench/gpu_session.sh run
#       On the device machine, from the repository root, in ONE call:
#           carry:   [".gpu"]
#           command: bash runtime/bench/gpu_session.sh run
#       No set-up: lms finds libcuda on the loader path and NVRTC, cuBLAS and cuDNN in
#       python3's site-packages/nvidia/*/lib (PyTorch's wheels; CUDA 13.0, driver 580).
#       Writes logs and results to $OUT (or ./gpu-results): env.txt, doctor.txt, one log per
#       step, resnet50_b64_tflms_trace.json and summary.md (pass/fail per step, the GPU,
#       driver and date) — the source of runtime/bench/results/<date>-<gpu>.md.
#
# Steps (the GPU half of the CUDA issue): lms doctor; per-kernel parity with the CPU
# (runtime cuda tests) and whole-graph parity with bit-identical TFLMS rewrites
# (gpu_parity) with LMS_REQUIRE_GPU=1, so nothing skips; ResNet-50 light at batch 2, 3 steps:
# the forward loss within 1e-5 of the CPU's and the step-1 gradients within 3x what a one-ulp
# change of the input moves them on the CPU (gpu_parity_check.py says why a fixed tolerance on
# later losses cannot work there), the TFLMS-rewritten graph's losses bit-identical to the
# original's on the GPU, the run's peak device bytes equal to `lms simulate`'s; a trace of
# ResNet-50 at batch 64 with TFLMS planned at 3 GiB and run under 4 GiB (room for the
# convolutions' workspaces, which the plan does not hold yet), with the number of swap copies
# that overlap a compute kernel; ResNet-50 at batch 1024, auto, planned at 15 GiB, trained 2
# steps under 16 GiB; kernels on tensors of more than 2^31 elements (runtime/tests/cuda_large.rs).
# A failing step is recorded and the next one runs; a
# step that runs past STEP_SECONDS (default 150) is stopped and recorded as failed, so one
# hang cannot spend the whole lease.
#
#   bash runtime/bench/gpu_session.sh measure     (carry [".gpu"]; one call, about 5 minutes)
#       The measured device profile ($OUT/<gpu>-measured.json, to commit as
#       compiler/profiles/<gpu>-measured.json) and predicted against measured steps on it
#       ($OUT/time_model.md, by runtime/bench/time_model_check.py).
#
#   bash runtime/bench/gpu_session.sh window      (carry [".gpu"]; one call, under 8 minutes)
#       `run` without the large tensors, then `measure`, each under a time limit, with the
#       logs packed into $OUT/logs.tgz: the first call of a 15-minute lease.
#
#   bash runtime/bench/gpu_session.sh compare     (carry [".gpu"]; one call, up to 9 minutes)
#       GPT-2-small against PyTorch under one 16 GiB cap ($OUT/gpt2_vs_torch.md, by
#       gpu_benchmark.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
GPU_DIR="$ROOT/.gpu"

prepare() {
    set -e
    cargo build --release --workspace
    rm -rf "$GPU_DIR" && mkdir -p "$GPU_DIR/bin"
    cp target/release/lms "$GPU_DIR/bin/lms"
    for spec in "lms-runtime --test cuda:cuda" "lms-runtime --lib:runtime_lib" \
        "lms-tests --test gpu_parity:gpu_parity" "lms-tests --test cli_cuda:cli_cuda" \
        "lms-runtime --test cuda_large:cuda_large"; do
        local args="${spec%%:*}" name="${spec##*:}" exe
        # shellcheck disable=SC2086
        exe="$(cargo test --release -p $args --no-run 2>&1 | grep -o 'target/release/deps/[A-Za-z0-9_-]*' | tail -1)"
        [[ -x "$exe" ]] || { echo "gpu_session: no test binary for $args" >&2; exit 1; }
        cp "$exe" "$GPU_DIR/bin/$name"
    done
    cp fixtures/data/onnx/light/light_resnet50.onnx "$GPU_DIR/"
    # The GPT-2-small-shaped model (weights as ConstantOfShape: 4 MB), made here where onnx is.
    fixtures/.venv/bin/python runtime/bench/make_gpt2.py -o "$GPU_DIR/gpt2.onnx"
    du -sh "$GPU_DIR"
}

run() {
    local out="${OUT:-$ROOT/gpu-results}" lms="$GPU_DIR/bin/lms" model="$GPU_DIR/light_resnet50.onnx"
    local work
    work="$(mktemp -d)"
    mkdir -p "$out"
    export LMS_REPO_ROOT="$ROOT" LMS_BIN="$lms" LMS_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
    local summary="$out/summary.md" failures=0
    {
        echo "# CUDA backend on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
        echo
        echo "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), $(date -u +%F)," \
            "lms $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        echo
        echo "| step | result | seconds |"
        echo "|---|---|---|"
    } > "$summary"
    { nvidia-smi; uname -a; python3 --version; } > "$out/env.txt" 2>&1
    # step NAME COMMAND...: runs it, logs to $out/NAME.log, records the verdict.
    step() {
        local name="$1" start verdict
        shift
        start=$(date +%s)
        echo "== $name: $*"
        if timeout -k 5 "${STEP_SECONDS:-150}" "$@" > "$out/$name.log" 2>&1; then
            verdict=pass
        else
            verdict="FAIL (exit $?)"
            failures=$((failures + 1))
        fi
        echo "| $name | $verdict | $(($(date +%s) - start)) |" >> "$summary"
        tail -3 "$out/$name.log"
    }
    step doctor "$lms" doctor
    step kernel_parity "$GPU_DIR/bin/cuda" --test-threads=1
    step runtime_unit "$GPU_DIR/bin/runtime_lib" --test-threads=1 cuda
    step graph_parity "$GPU_DIR/bin/gpu_parity" --test-threads=1
    step cli_cuda "$GPU_DIR/bin/cli_cuda" --test-threads=1

    local plain="$work/r50_b2.lms" swapped="$work/r50_b2_tflms.lms"
    step compile_r50_b2 "$lms" compile "$model" --batch 2 --train momentum -o "$plain"
    step compile_r50_b2_tflms "$lms" compile "$model" --batch 2 --train momentum --strategy tflms -o "$swapped"
    step run_r50_cpu sh -c "'$lms' run '$plain' --device cpu --steps 3 --json > '$work/cpu.json'"
    step run_r50_cuda sh -c "'$lms' run '$plain' --device cuda --steps 3 --json > '$work/cuda.json'"
    step run_r50_cuda_tflms sh -c "'$lms' run '$swapped' --device cuda --steps 3 --json > '$work/cuda_tflms.json'"
    step simulate_r50_tflms sh -c "'$lms' simulate '$swapped' --json > '$work/sim_tflms.json'"
    cp "$work"/*.json "$out/" 2>/dev/null
    step r50_checks python3 - "$work" <<'EOF'
import json, pathlib, struct, sys
w = pathlib.Path(sys.argv[1])
cpu, gpu, swapped, sim = (json.loads((w / f).read_text()) for f in ("cpu.json", "cuda.json", "cuda_tflms.json", "sim_tflms.json"))
bits = lambda xs: [struct.unpack("<I", struct.pack("<f", x))[0] for x in xs]
ok = abs(gpu["losses"][0] - cpu["losses"][0]) <= 1e-5 * abs(cpu["losses"][0])
print(f"losses cpu {cpu['losses']} gpu {gpu['losses']} (later steps: see r50_parity)")
same = bits(gpu["losses"]) == bits(swapped["losses"])
print(f"tflms on gpu bit-identical: {same} ({gpu['losses']} vs {swapped['losses']})")
peak = swapped["peak_device_bytes"] == sim["peak_device_bytes"]
print(f"peak device run {swapped['peak_device_bytes']} simulated {sim['peak_device_bytes']}: {'equal' if peak else 'DIFFERENT'}")
sys.exit(0 if ok and same and peak else 1)
EOF

    # Losses and step-1 gradients against the CPU's, within what rounding alone moves them.
    step r50_parity python3 runtime/bench/gpu_parity_check.py "$lms" "$plain" "$swapped" "$work"

    # The plan does not yet hold the convolutions' workspaces: compile under the run's
    # device memory, leaving room for them.
    local big="$work/r50_b64_tflms.lms" trace="$out/resnet50_b64_tflms_trace.json"
    step compile_r50_b64_tflms "$lms" compile "$model" --batch 64 --train momentum --strategy tflms --budget 3GiB -o "$big"
    step trace_r50_b64_tflms "$lms" run "$big" --device cuda --steps 3 --device-memory 4GiB --trace "$trace"
    step trace_overlap python3 - "$trace" <<'EOF'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
compute = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == 1)
copies = [e for e in events if e["tid"] in (2, 3)]
def overlaps(e):
    s, t = e["ts"], e["ts"] + e["dur"]
    return any(a < t and s < b for a, b in compute)
n = sum(overlaps(e) for e in copies)
step = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)
print(f"{len(compute)} kernels, {len(copies)} swap copies, {n} overlapping a kernel; step {step / 1e3:.1f} ms")
sys.exit(0 if copies and n > 0 else 1)
EOF

    # A large plan at its planned offsets: ResNet-50 at batch 1024, auto, planned at 15 GiB
    # and run under 16 GiB (1 GiB for the convolutions' workspaces, which the plan does not
    # hold yet). The backend's own allocator once fragmented and failed on this plan.
    local large="$work/r50_b1024_auto.lms"
    step compile_r50_b1024_auto "$lms" compile "$model" --batch 1024 --strategy auto --budget 15GiB \
        --host-budget 64GiB -o "$large"
    step run_r50_b1024_auto "$lms" run "$large" --device cuda --steps 2 --device-memory 16GiB
    # Kernels on tensors of more than 2^31 elements against the CPU (about 17 GB on the GPU,
    # 35 GB on the host per case; the CPU's reference takes most of the time).
    # LARGE_TENSOR_SECONDS=0 leaves the step out (`window` does: it does not fit one lease).
    if [[ "${LARGE_TENSOR_SECONDS:-300}" -gt 0 ]]; then
        STEP_SECONDS="${LARGE_TENSOR_SECONDS:-300}" step large_tensors "$GPU_DIR/bin/cuda_large" --nocapture
    else
        echo "| large_tensors | left out (LARGE_TENSOR_SECONDS=0) | 0 |" >> "$summary"
    fi
    {
        echo
        echo "failures: $failures"
    } >> "$summary"
    cat "$summary"
    rm -rf "$work"
    [[ $failures -eq 0 ]]
}

# The GPU's name as a file-name slug (h100-80gb-hbm3), for the measured profile.
gpu_slug() {
    nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z' |
        sed -e 's/^nvidia //' -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/-$//'
}

# The time model against the GPU: `lms profile --device cuda` into $OUT/<gpu>-measured.json,
# then runtime/bench/time_model_check.py on that profile (ResNet-50 light at batch 64 and the
# GPT-2-small shape at batch 8; plain, and TFLMS and auto at half the plain arena): predicted
# against measured step, $OUT/time_model.md.
measure() {
    local out="${OUT:-$ROOT/gpu-results}" lms="$GPU_DIR/bin/lms" failures=0
    local profile
    mkdir -p "$out"
    profile="$out/$(gpu_slug)-measured.json"
    export LMS_REPO_ROOT="$ROOT" PYTHONUNBUFFERED=1
    echo "== profile"
    timeout -k 5 200 "$lms" profile --device cuda -o "$profile" --name "$(gpu_slug)-measured" \
        > "$out/profile.log" 2>&1 || failures=$((failures + 1))
    tail -5 "$out/profile.log"
    echo "== time model"
    timeout -k 5 "${MEASURE_SECONDS:-360}" python3 runtime/bench/time_model_check.py --lms "$lms" --device cuda \
        --profile "$profile" --case "resnet50=$GPU_DIR/light_resnet50.onnx:64" --case "gpt2=$GPU_DIR/gpt2.onnx:8" \
        --out "$out/time_model.md" --json "$out/time_model.json" || failures=$((failures + 1))
    echo "failures: $failures"
    [[ $failures -eq 0 ]]
}

# GPT-2-small against PyTorch (the ResNet-50 table was measured in the first GPU session):
# lms plain, TFLMS and auto, PyTorch eager, checkpointing and save_on_cpu, under 16 GiB.
compare() {
    local out="${OUT:-$ROOT/gpu-results}"
    mkdir -p "$out"
    export LMS_REPO_ROOT="$ROOT" PYTHONUNBUFFERED=1
    timeout -k 5 "${COMPARE_SECONDS:-540}" python3 runtime/bench/gpu_benchmark.py --models gpt2 \
        --lms "$GPU_DIR/bin/lms" --onnx "gpt2=$GPU_DIR/gpt2.onnx" --batches "${GPT2_BATCHES:-gpt2=8,16,24,32,48}" \
        --steps 5 --warmup 2 --timeout 120 --out "$out/gpt2_vs_torch.md"
}

# `run` without the large tensors, then `measure`, in one call under a time plan that ends
# inside one 10-minute command, and the device's files packed for the trip back (which takes
# at most 8 files): $OUT/summary.md, $OUT/time_model.md, $OUT/<gpu>-measured.json and
# $OUT/logs.tgz (every log and result of both halves).
window() {
    local final="${OUT:-$ROOT/gpu-results}" work status=0
    work="$(mktemp -d)"
    mkdir -p "$final"
    OUT="$work" LARGE_TENSOR_SECONDS=0 STEP_SECONDS="${STEP_SECONDS:-100}" \
        timeout -k 5 "${RUN_SECONDS:-220}" bash "$0" run > "$work/run.txt" 2>&1 || status=1
    OUT="$work" MEASURE_SECONDS="${MEASURE_SECONDS:-200}" \
        timeout -k 5 "${MEASURE_TOTAL_SECONDS:-260}" bash "$0" measure > "$work/measure.txt" 2>&1 || status=1
    cp "$work/summary.md" "$work/time_model.md" "$work"/*-measured.json "$final/" 2>/dev/null
    tar czf "$final/logs.tgz" -C "$work" .
    cat "$work/summary.md" 2>/dev/null
    tail -20 "$work/measure.txt"
    cat "$work/time_model.md" 2>/dev/null
    rm -rf "$work"
    return $status
}

case "${1:-}" in
    prepare) prepare ;;
    window) window ;;
    run) run ;;
    measure) measure ;;
    compare) compare ;;
    *)
        echo "usage: bash runtime/bench/gpu_session.sh prepare|run|measure|window|compare (see the header)" >&2
        exit 2
        ;;
esac
