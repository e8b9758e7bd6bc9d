#!/usr/bin/env bash
# CI: the real vendor wheels that install from the public index, each met by its plugin, and
# tests/vendor/ run against each (the fakes in accelbackends.testing stay for the device paths
# that need hardware).
#
# - intel-extension-for-pytorch 2.8.0 with --no-deps: a CPU wheel built for torch 2.8 (its
#   own torch pin would replace 2.13 with a 2.8 CUDA build of several GB).
# - torch-npu 2.13.0 and plugins/accelbackends-ascend, without Ascend's CANN toolkit.
# - nvidia-ml-py, on a node without the NVIDIA driver.
# The CUDA build of torch from the public index (no GPU) is covered by the torch-version CI.
#
# One virtual environment in a temporary directory holds torch 2.13 and the package; each
# wheel goes into its own directory beside it, put on PYTHONPATH only for its own tests, so no
# case sees another's wheel. (Three venvs of their own cost three torch installs: 8.5 minutes
# here against about 3.)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
pip=("$work/venv/bin/pip" install --quiet --disable-pip-version-check)
# torch first, pinned, so the CPU build is used as in .ci/run; then the package from its files.
"${pip[@]}" torch==2.13.0
"${pip[@]}" -e '.[test]'
"${pip[@]}" --target "$work/ipex" --no-deps intel-extension-for-pytorch==2.8.0
"${pip[@]}" --target "$work/npu" --no-deps torch-npu==2.13.0 pyyaml \
    plugins/accelbackends-ascend
"${pip[@]}" --target "$work/nvml" --no-deps nvidia-ml-py
installed=$(date +%s)

for case in ipex npu nvml; do
    file=tests/vendor/test_$([ "$case" = npu ] && echo torch_npu || echo "$case").py
    echo "vendor wheels: $case: $(ls "$work/$case" | sed -n 's/\.dist-info$//p' | paste -sd ' ' -)" \
        "beside torch $("$work/venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')"
    # -p no:cacheprovider: nothing written into the clean clone. No skips allowed: each file
    # runs where its wheel is installed.
    status=0
    output=$(PYTHONPATH="$work/$case" "$work/venv/bin/python" -m pytest -p no:cacheprovider \
        -q -rs "$file" 2>&1) || status=$?
    echo "$output"
    if [ "$status" != 0 ]; then exit "$status"; fi
    if grep -q '^SKIPPED' <<<"$output"; then
        echo "vendor wheels: $file skipped a test where its wheel is installed" >&2
        exit 1
    fi
done
finished=$(date +%s)
echo "vendor wheels: installed in $((installed - start)) s, tested in $((finished - installed)) s"
