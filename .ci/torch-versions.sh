#!/usr/bin/env bash
# CI: the oldest and the newest torch the package accepts, beside the pinned CPU build that
# .ci/run tests. Each is the CUDA build from the public index, as `pip install torch` gives it
# on a node without a GPU (NCCL compiled in, no driver), in its own virtual environment, with
# the package installed editable. Each runs the tests that cover init, spawn, membership,
# check, the accelerator plugins with their fake stacks, launcher recognition, attach and the
# torch-version differences (docs/torch-versions.md); tests/gpu skips itself without a GPU.
#
# The torch wheels are kept for the next run in ACCELBACKENDS_CI_WHEELS (default: a directory
# under the user's cache), so only the first run downloads them.
# Usage: .ci/torch-versions.sh [VERSION ...]   (default: the oldest and the newest below)
set -euo pipefail
cd "$(dirname "$0")/.."

# The oldest must be the floor pyproject.toml declares (torch>=MAJOR.MINOR), at its last patch.
OLDEST=2.4.1
NEWEST=2.15.0
floor=$(sed -n 's/^ *"torch>=\([0-9.]*\)",.*/\1/p' pyproject.toml)
if [ "${OLDEST%.*}" != "$floor" ]; then
    echo "torch-versions: pyproject.toml declares torch>=$floor but this leg tests $OLDEST" >&2
    exit 1
fi
if [ "$#" -gt 0 ]; then versions=("$@"); else versions=("$OLDEST" "$NEWEST"); fi

tests=(
    tests/plugin/test_torch_versions.py
    tests/job/test_lifecycle.py tests/job/test_lifecycle_undo.py tests/job/test_spawn.py
    tests/rendezvous/test_membership.py tests/rendezvous/test_errors.py tests/rendezvous/test_single_host_store.py
    tests/rendezvous/test_storewire.py tests/host/test_workers.py
    tests/cli/check/test_check.py tests/job/test_selection.py tests/rendezvous/test_torchrun.py
    tests/accelerators/test_cuda.py tests/accelerators/test_xpu.py tests/accelerators/test_hpu.py
    tests/accelerators/test_fake_stacks.py tests/plugin/test_devices.py
    tests/plugin/test_packages.py
    tests/environments tests/integrations/test_attach.py tests/gpu
)

venvs=$(mktemp -d)
trap 'rm -rf "$venvs"' EXIT

# torch and its NVIDIA packages (several GB per release) are kept as wheels between runs:
# pip's own HTTP cache may not keep them (it follows the index's cache headers), and
# `pip download` skips a file already in the directory.
wheels=${ACCELBACKENDS_CI_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/accelbackends-ci/torch-wheels}
mkdir -p "$wheels"

# The installs (downloads, mostly) run side by side; each writes how long it took.
install() {
    local version=$1 venv="$venvs/torch-$1" start pip
    start=$(date +%s)
    python3 -m venv "$venv"
    # A machine's pip configuration may carry a constraints file that caps torch at the
    # releases it keeps on disk (CI's machines cap it at 2.14.1, so torch==2.15.0 is
    # "ResolutionImpossible"). This venv exists to hold another torch: lift the cap for its
    # pip calls alone; the pinned install of .ci/run stays under the machine's configuration.
    pip=(env PIP_CONSTRAINT=/dev/null "$venv/bin/pip" --disable-pip-version-check)
    {
        "${pip[@]}" download --quiet -d "$wheels/$version" "torch==$version" &&
            "${pip[@]}" install --quiet --no-index --find-links "$wheels/$version" "torch==$version" &&
            "${pip[@]}" install --quiet -e '.[test]'
    } >"$venv.log" 2>&1 || { cat "$venv.log" >&2; return 1; }
    echo $(($(date +%s) - start)) >"$venv.seconds"
}
started=$(date +%s)
pids=()
for version in "${versions[@]}"; do
    install "$version" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
echo "torch-versions: installed ${versions[*]} in $(($(date +%s) - started)) s"

# Where this machine can (root, unshare), the subset runs on an emulated GPU node: the probes
# find an NVIDIA GPU in /proc/driver/nvidia, as on a real node, beside a CUDA build of torch
# that finds no driver. The suite must stay hermetic there (only tests marked gpu may see it).
emulate=()
node="a machine without a GPU"
if .ci/emulated-gpu-node.sh true 2>/dev/null; then
    emulate=(.ci/emulated-gpu-node.sh)
    node="an emulated GPU node"
fi

summary=()
failed=0
for version in "${versions[@]}"; do
    venv="$venvs/torch-$version"
    build=$("$venv/bin/python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "with a GPU" if torch.cuda.is_available() else "no GPU")')
    echo "torch-versions: torch $version ($build)"
    start=$(date +%s)
    status=0
    # -p no:cacheprovider: nothing written into the clean clone.
    "${emulate[@]}" "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra "${tests[@]}" || status=$?
    [ "$status" = 0 ] || failed=1
    summary+=("torch $version ($build) on $node: installed in $(cat "$venv.seconds") s, tested in $(($(date +%s) - start)) s, pytest exit $status")
done
printf 'torch-versions: %s\n' "${summary[@]}"
exit "$failed"
