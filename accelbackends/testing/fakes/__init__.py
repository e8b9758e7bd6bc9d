"""Sources of the fake vendor packages. Test code only.

`accelbackends.testing.FakeStack` copies the packages wanted into a directory that goes
on a child process's ``PYTHONPATH``, beside their installed-package metadata; they are never
imported from here.

- `habana_frameworks`: Intel Gaudi's software: the ``hpu`` device and ``hccl``.
- `oneccl_bindings_for_pytorch`: oneCCL's bindings, registering ``ccl``.
- `intel_extension_for_pytorch`: Intel's extension, which like the real one for the CPU
  provides no device.
- `torch_npu`: Huawei Ascend's ``npu`` device and ``hccl``.
- `runtime`: what the fake packages share: Gloo standing in for a vendor's collectives, and
  the fake XPU build of torch.
- `sitecustomize`: loaded at start-up from that directory; patches torch into a fake XPU build
  where asked.
"""
