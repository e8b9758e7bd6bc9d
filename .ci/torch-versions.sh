#!/usr/bin/env bash
# CI: the oldest and the newest torch the package accepts, beside the pinned CPU build that
# .ci/run tests. Each is the CUDA build from the public index, as `pip install torch` gives it
# on a node without a GPU (NCCL compiled in, no driver), in its own virtual environment, with
# the package installed editable. Each runs the tests that cover init, spawn, membership,
# check, the accelerator plugins with their fake stacks, launcher recognition, attach and the
# torch-version differences (docs/torch-versions.md); tests/gpu skips itself without a GPU.
#
# pip's own cache (not disabled here) keeps the wheels, several GB each, for the next run.
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
    tests/test_torch_versions.py
    tests/test_lifecycle.py tests/test_lifecycle_undo.py tests/test_spawn.py
    tests/test_membership.py tests/test_rendezvous_errors.py tests/test_single_host_store.py
    tests/test_check.py tests/test_selection.py tests/test_torchrun.py
    tests/test_accelerator_cuda.py tests/test_accelerator_xpu.py tests/test_accelerator_hpu.py
    tests/test_accelerator_fake_stacks.py tests/test_accelerator_devices.py
    tests/test_accelerator_packages.py
    tests/environments tests/integrations/test_attach.py tests/gpu
)

venvs=$(mktemp -d)
trap 'rm -rf "$venvs"' EXIT
summary=()
for version in "${versions[@]}"; do
    venv="$venvs/torch-$version"
    start=$(date +%s)
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "torch==$version" -e '.[test]'
    installed=$(date +%s)
    build=$("$venv/bin/python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "GPU" if torch.cuda.is_available() else "no GPU")')
    echo "torch-versions: torch $version installed ($build)"
    # -p no:cacheprovider: nothing written into the clean clone.
    status=0
    "$venv/bin/python" -m pytest -p no:cacheprovider -q -ra "${tests[@]}" || status=$?
    finished=$(date +%s)
    summary+=("torch $version ($build): installed in $((installed - start)) s, tested in $((finished - installed)) s, pytest exit $status")
    rm -rf "$venv"
done
printf 'torch-versions: %s\n' "${summary[@]}"
for line in "${summary[@]}"; do
    case "$line" in *"pytest exit 0") ;; *) exit 1 ;; esac
done
