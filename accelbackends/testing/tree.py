"""A fake machine: the sysfs, procfs and ``/dev`` entries that accelerator probes read.

Build one in a temporary directory and hand its root to a probe (``FakeTree.probe()``) or to a
registry (``accelbackends.Registry(root=tree.root)``):

```python
tree = FakeTree(tmp_path).nvidia(2).intel_gpu(integrated=True)
status = accelbackends.detect(registry=accelbackends.Registry(root=tree.root))
```

CPU topology for CPU affinity: ``cpus()`` (sockets, cores, SMT, NUMA nodes), ``affinity()`` (the
process's allowed CPUs, as a scheduler narrowed them) and ``cpuset()`` (a cgroup's limit); a
device's NUMA node with ``numa=`` on the device builders (call ``cpus()`` first).

Device nodes are empty files: probes only ask whether they exist.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..plugin.types import Probe

__all__ = ["FakeTree"]


class FakeTree:
    """Builds the entries under ``root``; every method returns the tree, so calls chain."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def write(self, absolute: str, text: str = "") -> FakeTree:
        """A file at ``absolute`` (under the root) with ``text``."""
        path = self.path(absolute)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return self

    def link(self, absolute: str, target: str) -> FakeTree:
        """A symbolic link at ``absolute`` to ``target`` (relative links stay inside the tree)."""
        path = self.path(absolute)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        path.symlink_to(target)
        return self

    def _next(self, directory: str, prefix: str, start: int = 0) -> int:
        taken = {
            int(entry.name[len(prefix) :])
            for entry in (self.path(directory).iterdir() if self.path(directory).exists() else ())
            if entry.name.startswith(prefix) and entry.name[len(prefix) :].isdigit()
        }
        index = start
        while index in taken:
            index += 1
        return index

    # -- NVIDIA ----------------------------------------------------------------------------

    def nvidia(
        self,
        count: int = 1,
        *,
        proc: bool = True,
        dev: bool = True,
        numa: Sequence[int] | None = None,
    ) -> FakeTree:
        """``count`` NVIDIA GPUs as the driver shows them without NVML: a directory per GPU in
        ``/proc/driver/nvidia/gpus`` and ``/dev/nvidiaN`` nodes; ``numa`` gives each GPU's NUMA
        node (its PCI function in ``/sys/bus/pci/devices``)."""
        for index in range(count):
            if numa is not None:
                self.pci_locality(f"/sys/bus/pci/devices/0000:{index + 0x17:02x}:00.0", numa[index])
            if proc:
                self.write(
                    f"/proc/driver/nvidia/gpus/0000:{index + 0x17:02x}:00.0/information",
                    "Model: \t\t NVIDIA H100 80GB HBM3\n",
                )
            if dev:
                self.write(f"/dev/nvidia{index}")
        if dev and count:
            self.write("/dev/nvidiactl")
        return self

    # -- AMD -------------------------------------------------------------------------------

    def amd(self, count: int = 1) -> FakeTree:
        """``count`` AMD GPUs: ``/dev/kfd`` and a KFD topology with a CPU node and GPU nodes."""
        self.write("/dev/kfd")
        nodes = "/sys/class/kfd/kfd/topology/nodes"
        self.write(f"{nodes}/0/properties", "cpu_cores_count 64\nsimd_count 0\nvendor_id 0\n")
        for index in range(1, count + 1):
            self.write(
                f"{nodes}/{index}/properties",
                "cpu_cores_count 0\nsimd_count 304\nvendor_id 4098\ngfx_target_version 90402\n",
            )
        return self

    # -- Intel GPUs ------------------------------------------------------------------------

    def intel_gpu(
        self,
        *,
        integrated: bool = False,
        driver: str = "xe",
        slot: str | None = None,
        vendor: str = "0x8086",
        numa: int | None = None,
    ) -> FakeTree:
        """An Intel GPU (or, with another ``vendor``, any GPU) with a ``card`` and a render
        node in ``/sys/class/drm``, linked to its PCI device like the kernel does."""
        render = self._next("/sys/class/drm", "renderD", 128)
        card = render - 128
        if slot is None:
            slot = "0000:00:02.0" if integrated else f"0000:{0x03 + card:02x}:00.0"
        device = f"/sys/devices/pci0000:00/{slot}"
        self.write(f"{device}/vendor", f"{vendor}\n")
        self.write(f"{device}/uevent", f"DRIVER={driver}\nPCI_SLOT_NAME={slot}\n")
        self.link(f"{device}/driver", f"../../../bus/pci/drivers/{driver}")
        self.path(f"/sys/bus/pci/drivers/{driver}").mkdir(parents=True, exist_ok=True)
        if numa is not None:
            self.pci_locality(device, numa)
        for name in (f"card{card}", f"renderD{render}"):
            self.link(f"/sys/class/drm/{name}/device", f"../../../devices/pci0000:00/{slot}")
            self.write(f"/dev/dri/{name}")
        return self

    # -- Habana Gaudi ----------------------------------------------------------------------

    def gaudi(
        self,
        count: int = 1,
        *,
        dev: bool = True,
        vendor: str = "0x1da3",
        numa: Sequence[int] | None = None,
    ) -> FakeTree:
        """``count`` accel-class devices (Gaudi with the default ``vendor``) in
        ``/sys/class/accel``, with ``/dev/accel/accelN`` nodes unless ``dev`` is False (as in
        a container the devices were not mounted into)."""
        for _ in range(count):
            index = self._next("/sys/class/accel", "accel")
            self.write(f"/sys/class/accel/accel{index}/device/vendor", f"{vendor}\n")
            self.write(f"/sys/class/accel/accel{index}/device/module_id", f"{index}\n")
            if numa is not None:
                self.pci_locality(f"/sys/class/accel/accel{index}/device", numa[index])
            if dev:
                self.write(f"/dev/accel/accel{index}")
        return self

    def gaudi_legacy(self, count: int = 1) -> FakeTree:
        """``count`` Gaudi devices as drivers before the accel subsystem show them: ``/dev/hlN``."""
        for index in range(count):
            self.write(f"/dev/hl{index}")
            self.write(f"/dev/hl_controlD{index}")
        return self

    # -- CPU topology ----------------------------------------------------------------------

    def cpus(
        self, *, sockets: int = 1, cores: int = 4, smt: bool = False, numa: bool = True
    ) -> FakeTree:
        """A machine of ``sockets`` x ``cores`` physical cores, two CPUs per core with ``smt``,
        numbered as Linux does on x86 (every core's first thread, then every second thread),
        one NUMA node per socket (none shown with ``numa=False``)."""
        total = sockets * cores
        threads = 2 if smt else 1
        cpu_dir = "/sys/devices/system/cpu"
        self.write(f"{cpu_dir}/online", f"0-{total * threads - 1}\n")
        for core in range(total):
            siblings = [core + thread * total for thread in range(threads)]
            for cpu in siblings:
                self.write(
                    f"{cpu_dir}/cpu{cpu}/topology/thread_siblings_list",
                    _cpulist(siblings) + "\n",
                )
        if numa:
            for socket in range(sockets):
                node = [
                    core + thread * total
                    for thread in range(threads)
                    for core in range(socket * cores, (socket + 1) * cores)
                ]
                self.write(f"/sys/devices/system/node/node{socket}/cpulist", _cpulist(node) + "\n")
        return self

    def affinity(self, cpulist: str) -> FakeTree:
        """This process's allowed CPUs (``Cpus_allowed_list`` in ``/proc/self/status``), as a
        scheduler or launcher narrowed them."""
        return self.write("/proc/self/status", f"Name:\tpython\nCpus_allowed_list:\t{cpulist}\n")

    def cpuset(self, cpulist: str, *, cgroup: str = "/job", version: int = 2) -> FakeTree:
        """This process's cgroup ``cgroup`` limited to ``cpulist`` by the cpuset controller
        (cgroup ``version`` 2 or 1)."""
        if version == 2:
            self.write("/proc/self/cgroup", f"0::{cgroup}\n")
            return self.write(f"/sys/fs/cgroup{cgroup}/cpuset.cpus.effective", cpulist + "\n")
        self.write("/proc/self/cgroup", f"3:cpuset:{cgroup}\n0::/\n")
        return self.write(f"/sys/fs/cgroup/cpuset{cgroup}/cpuset.effective_cpus", cpulist + "\n")

    def pci_locality(self, device: str, numa: int) -> FakeTree:
        """``numa_node`` and ``local_cpulist`` of the PCI function at ``device``: the CPUs of
        NUMA node ``numa`` as ``cpus()`` wrote them (-1: the platform does not say)."""
        self.write(f"{device}/numa_node", f"{numa}\n")
        node = self.path(f"/sys/devices/system/node/node{numa}/cpulist")
        if numa >= 0 and node.exists():
            self.write(f"{device}/local_cpulist", node.read_text(encoding="utf-8"))
        return self

    # -- links: PCIe and NICs ----------------------------------------------------------------

    def pcie(
        self,
        device: str,
        generation: int = 5,
        width: int = 16,
        *,
        max_generation: int | None = None,
        max_width: int | None = None,
    ) -> FakeTree:
        """The PCIe link of the PCI function at ``device`` (``/sys/bus/pci/devices/...``): the
        generation and width it trained at, and its maximum (the same where not given)."""
        speeds = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}
        top_gen = max_generation or generation
        self.write(f"{device}/current_link_speed", f"{speeds[generation]} GT/s PCIe\n")
        self.write(f"{device}/current_link_width", f"{width}\n")
        self.write(f"{device}/max_link_speed", f"{speeds[top_gen]} GT/s PCIe\n")
        return self.write(f"{device}/max_link_width", f"{max_width or width}\n")

    def infiniband(
        self,
        name: str = "mlx5_0",
        gbps: int = 400,
        *,
        port: int = 1,
        link_layer: str = "InfiniBand",
        state: str = "4: ACTIVE",
    ) -> FakeTree:
        """An InfiniBand port (``link_layer="Ethernet"``: RoCE) at ``gbps`` Gb/s, as
        ``/sys/class/infiniband/<name>/ports/<port>/`` shows it."""
        base = f"/sys/class/infiniband/{name}/ports/{port}"
        names = {100: "EDR", 200: "HDR", 400: "NDR", 800: "XDR"}
        self.write(f"{base}/rate", f"{gbps} Gb/sec (4X {names.get(gbps, 'unknown')})\n")
        self.write(f"{base}/link_layer", f"{link_layer}\n")
        return self.write(f"{base}/state", f"{state}\n")

    def ethernet(
        self, name: str = "eth0", mbps: int | None = 100000, *, up: bool = True
    ) -> FakeTree:
        """A physical Ethernet interface at ``mbps`` Mb/s (None: the kernel's -1 of a link
        that is down), with the ``device`` link that tells it from a virtual one."""
        self.write(f"/sys/class/net/{name}/speed", f"{-1 if mbps is None else mbps}\n")
        self.write(f"/sys/class/net/{name}/operstate", "up\n" if up else "down\n")
        return self.write(f"/sys/class/net/{name}/device/vendor", "0x15b3\n")

    # -- the real machine's CPUs -------------------------------------------------------------

    def host_cpus(self) -> FakeTree:
        """This machine's CPUs and nothing else: links to the real ``/proc/self``,
        ``/sys/devices/system/cpu``, ``/sys/devices/system/node`` and ``/sys/fs/cgroup``, so
        that CPU affinity plans as it would here while no accelerator probe finds a device.

        A test suite that points ``ACCELBACKENDS_PROBE_ROOT`` at such a tree is hermetic: on a
        GPU node too, its tests and the ranks they start see only the CPU, unless a test adds a
        fake device to a tree of its own."""
        for absolute in _HOST_CPU_FACTS:
            if os.path.exists(absolute):
                self.link(absolute, absolute)
        return self

    # -- probes ----------------------------------------------------------------------------

    def probe(
        self, env: Mapping[str, str] | None = None, packages: Sequence[str] | None = None
    ) -> Probe:
        """A probe of this tree with ``env`` (empty by default: not this process's variables)
        and installed-package metadata from ``packages`` (``sys.path`` when None)."""
        return Probe(
            env=dict(env or {}),
            root=self.root,
            packages=None if packages is None else tuple(str(p) for p in packages),
        )


#: What CPU affinity reads of the machine (job.affinity): the process's mask and cgroup, the CPU
#: topology and the NUMA nodes. Nothing here names an accelerator.
_HOST_CPU_FACTS = (
    "/proc/self",
    "/sys/devices/system/cpu",
    "/sys/devices/system/node",
    "/sys/fs/cgroup",
)


def _cpulist(cpus: Iterable[int]) -> str:
    from ..plugin.locality import format_cpulist

    return format_cpulist(cpus)
