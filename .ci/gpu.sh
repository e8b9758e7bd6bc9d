#!/usr/bin/env bash
# The GPU lane: on any machine with an NVIDIA GPU and a CUDA build of torch already installed,
# install the package (and its test extra) beside that torch, then run, each under its own time
# limit: tests/gpu, the whole suite (hermetic: only tests marked gpu see the device),
# `accelbackends check`, the refusal of ranks sharing a GPU over NCCL, and the GPU benchmark
# (python -m benchmarks gpu). It writes one summary (summary.json and summary.md, with the row
# docs/hardware.md keeps) to $GPU_LANE_OUT (default benchmarks/results/gpu-lane).
# About 8 minutes on one GPU (GPU_LANE_BUDGET, seconds, bounds it: the suite gets what the
# other steps leave). CI does not run it: CI's machines have no GPU.
#
# Usage: .ci/gpu.sh                 (PYTHON=... picks the interpreter that holds the CUDA torch;
#                                   GPU_LANE_SKIP=benchmark,... leaves steps out)
# On a node without a package index, point pip at a folder of wheels for the build backend
# (hatchling and what it needs) the usual way: PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR .ci/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

python=${PYTHON:-python3}
out=${GPU_LANE_OUT:-benchmarks/results/gpu-lane}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu lane: $python's torch sees no CUDA GPU; this lane needs one (and a CUDA torch)" >&2
    exit 2
fi

# GPU_LANE_SKIP: comma-separated steps to leave out (e.g. benchmark, for a rerun). The lane's
# own settings have no ACCELBACKENDS_ prefix: accelbackends warns about names of its own it
# does not read.
skip=",${GPU_LANE_SKIP:-},"
step() {
    local name=$1 limit=$2 began=$SECONDS status=0
    shift 2
    if [[ $skip == *",$name,"* ]]; then
        echo "gpu lane: $name: left out (GPU_LANE_SKIP)" >&2
        return 0
    fi
    echo "gpu lane: $name" >&2
    if [ "$(type -t "$1")" = function ]; then
        "$@" >"$out/$name.log" 2>&1 || status=$?
    else
        timeout --kill-after 10 "$limit" "$@" >"$out/$name.log" 2>&1 || status=$?
    fi
    echo "$name $status $((SECONDS - began))" >>"$out/steps"
    echo "gpu lane: $name: exit $status in $((SECONDS - began)) s" >&2
    return 0
}
: >"$out/steps"
# A venv of our own that sees the packages of $python (its CUDA torch above all) behind its own,
# with the package installed editable into it: nothing of the machine's environment changes.
# (--system-site-packages would show the base interpreter's packages, not those of a venv that
# $python may itself be, as on images that keep torch in a venv.)
# Where the interpreter has no ensurepip (some images' venvs), the venv is made without pip and
# $python's own pip installs into it.
pip=("$work/venv/bin/python" -m pip)
if ! "$python" -m venv "$work/venv" 2>/dev/null; then
    rm -rf "$work/venv"
    "$python" -m venv --without-pip "$work/venv" || exit 1
    pip=("$python" -m pip --python "$work/venv/bin/python")
fi
py=$work/venv/bin/python
base=$("$python" -c 'import sysconfig; print(sysconfig.get_path("purelib")); print(sysconfig.get_path("platlib"))' | sort -u)
echo "$base" >"$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/gpu-lane-base.pth"
# The package with its test extra; where pip cannot resolve that offline (a torch whose own
# requirements are not all installed), the package alone over what the environment has.
install_package() {
    "${pip[@]}" install --quiet --disable-pip-version-check -e '.[test]' ||
        { "${pip[@]}" install --quiet --disable-pip-version-check --no-deps -e . &&
            "$py" -c 'import pluggy, numpy, pytest, pytest_timeout, hypothesis'; }
}
step install 300 install_package
if ! grep -q '^install 0 ' "$out/steps"; then
    cat "$out/install.log" >&2
    exit 1
fi
step facts 60 "$py" -c '
import json, os, subprocess, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                      "--format=csv,noheader"], capture_output=True, text=True).stdout
name, driver, memory = [x.strip() for x in smi.splitlines()[0].split(",")]
print(json.dumps({"gpu": name, "gpus": torch.cuda.device_count(), "driver": driver,
                  "memory": memory, "torch": torch.__version__, "cuda": torch.version.cuda,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                  "cores": len(os.sched_getaffinity(0))}))'

# xdist, where the machine has it, runs the suite on every core (each worker its own ports and
# temporary directories); the suite runs one test at a time without it.
parallel=()
if "$py" -c 'import xdist' 2>/dev/null; then
    parallel=(-n "${GPU_LANE_WORKERS:-$(($(nproc) > 8 ? 8 : $(nproc)))}")
fi
step info 60 "$work/venv/bin/accelbackends" info
step gpu-tests 120 "$py" -m pytest -p no:cacheprovider -v -rs tests/gpu --junitxml "$out/gpu-tests.xml"
step check 120 "$work/venv/bin/accelbackends" check
step check-json 120 "$work/venv/bin/accelbackends" check --json
# Two ranks on one GPU over NCCL: refused before any process group where NCCL forbids it
# (NCCL < 2.30), run with NCCL_MULTI_RANK_GPU_ENABLE=1 where it allows it.
if [ "$("$py" -c 'import torch; print(torch.cuda.device_count())')" = 1 ]; then
    ACCELBACKENDS_SHARE_DEVICES=1 step shared-gpu 120 "$work/venv/bin/accelbackends" check --nproc 2 --quick
    # GPU tensors over Gloo, two ranks on the one GPU: passes, or names the rank that died first.
    ACCELBACKENDS_SHARE_DEVICES=1 ACCELBACKENDS_BACKEND=gloo \
        step shared-gpu-gloo 120 "$work/venv/bin/accelbackends" check --nproc 2 --quick --json
fi
# The suite gets what is left of the lane's budget (GPU_LANE_BUDGET seconds, 8 minutes
# by default) after the benchmark's share; -v prints one line per test as it ends, so a run cut
# at its limit still shows how far it came and what failed.
budget=${GPU_LANE_BUDGET:-480}
reserve=120
[[ $skip == *",benchmark,"* ]] && reserve=0
suite_limit=$((budget - (SECONDS - started) - reserve))
[ "$suite_limit" -ge 60 ] || suite_limit=60
step suite "$suite_limit" "$py" -m pytest -p no:cacheprovider -v -rfEs "${parallel[@]}" \
    --junitxml "$out/suite.xml"
# Fewer rounds than the benchmark's defaults, so that the lane stays within its 8 minutes.
step benchmark 240 "$py" -m benchmarks gpu --rounds 5 --heavy-rounds 2 --init-rounds 4 \
    --out "$out/benchmark.json"

"$py" .ci/gpu_summary.py "$out" "$((SECONDS - started))"
