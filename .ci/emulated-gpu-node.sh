#!/usr/bin/env bash
# Run a command on this machine made to look like an NVIDIA GPU node to accelbackends' probes:
# in a private mount namespace, /proc/driver/nvidia/gpus lists one GPU (an H200's PCI function),
# as the NVIDIA driver shows it. Nothing outside the namespace changes. With a CUDA build of
# torch, `accelbackends info` then selects cuda, as on a real node; a hermetic test suite must
# pass there as on the CPU (only tests marked gpu may see the device, and they skip: torch
# finds no driver).
#
# Usage: .ci/emulated-gpu-node.sh COMMAND [ARGS...]   (needs root and unshare; exits 3 without)
set -euo pipefail
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || [ ! -d /proc/driver ]; then
    echo "emulated-gpu-node: needs root, unshare and /proc/driver" >&2
    exit 3
fi
exec unshare --mount --propagation private bash -c '
    mount -t tmpfs accelbackends-fake-driver /proc/driver
    gpu=/proc/driver/nvidia/gpus/0000:3b:00.0
    mkdir -p "$gpu"
    printf "Model: \t\t NVIDIA H200\nBus Location: \t 0000:3b:00.0\n" >"$gpu/information"
    exec "$@"' emulated-gpu-node "$@"
