#!/usr/bin/env bash
# CI: the real vendor wheels that install from the public index, each in its own virtual
# environment beside torch 2.13, and tests/vendor/ run against each (the fakes in
# accelbackends.testing stay for the device paths that need hardware).
#
# - intel-extension-for-pytorch 2.8.0 with --no-deps: a CPU wheel built for torch 2.8 (its
#   own torch pin would replace 2.13 with a 2.8 CUDA build of several GB).
# - torch-npu 2.13.0 and plugins/accelbackends-ascend, without Ascend's CANN toolkit.
# - nvidia-ml-py, on a node without the NVIDIA driver.
# The CUDA build of torch from the public index (no GPU) is covered by the torch-version CI.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

venvs=$(mktemp -d)
trap 'rm -rf "$venvs"' EXIT
pip_install() {
    "$venvs/$1/bin/pip" install --quiet --disable-pip-version-check "${@:2}"
}
for case in ipex npu nvml; do
    python3 -m venv "$venvs/$case"
    # torch first, pinned, so the CPU build is used as in .ci/run; then the package's own
    # requirements and the test tools, from its files.
    pip_install "$case" torch==2.13.0
    pip_install "$case" -e '.[test]'
done
pip_install ipex --no-deps intel-extension-for-pytorch==2.8.0
pip_install npu torch-npu==2.13.0 -e plugins/accelbackends-ascend
pip_install nvml nvidia-ml-py
installed=$(date +%s)

for case in ipex npu nvml; do
    file=tests/vendor/test_$( [ "$case" = npu ] && echo torch_npu || echo "$case" ).py
    echo "vendor wheels: $case: $("$venvs/$case/bin/pip" list 2>/dev/null \
        | grep -iE '^(torch|torch-npu|torch_npu|intel.extension.for.pytorch|nvidia-ml-py) ' \
        | tr -s ' ' | paste -sd ',' -)"
    # -p no:cacheprovider: nothing written into the clean clone. No skips allowed: each file
    # runs in the venv made for its wheel.
    status=0
    output=$("$venvs/$case/bin/python" -m pytest -p no:cacheprovider -q -rs "$file" 2>&1) \
        || status=$?
    echo "$output"
    if [ "$status" != 0 ]; then exit "$status"; fi
    if grep -q '^SKIPPED' <<<"$output"; then
        echo "vendor wheels: $file skipped a test in the venv made for it" >&2
        exit 1
    fi
done
finished=$(date +%s)
echo "vendor wheels: installed in $((installed - start)) s, tested in $((finished - installed)) s"
