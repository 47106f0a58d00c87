"""The host paths that reach GPUs, and why: the built-in table rule host-gpu-devices judges by.

A hostPath volume (or a mount a device-injection annotation asks for) reaches GPUs without an
allocation in four ways, each said in the denial:

- `devices`: it holds GPU device nodes (`/`, `/dev`, each vendor's nodes, `/dev/char`).
- `host-root`: the host's root, and so its `/dev`, is reachable from it (`/proc`, and the
  `/proc/<pid>` entries that lead into a host process's files: `root`, `cwd`, `fd`).
- `gpu-sysfs`: the GPUs' PCI devices in sysfs, or a path the host resolves to them: a process
  that can write there maps another tenant's GPU memory (the `resource<N>` BARs), resets or
  removes the GPU, or unbinds it from its driver. Device cgroups guard device nodes, not sysfs.
- `runtime`: a container runtime's socket, through which a new container, with any device of
  the node, can be started.

The kubelet resolves a hostPath on the host, following symlinks, and binds what it finds; the
links inside the mounted tree then resolve in the container's own filesystem. So a path reaches
what it resolves to on the host. Under `/sys` that can be almost anything: every device's
`subsystem` link leads to its bus (`/sys/bus/pci`, with each driver's `unbind`), `device` links
lead to PCI devices. `/sys` therefore counts whole, except filesystems and directories that hold
no device and no link (cgroup, bpf, security and tracing filesystems, firmware tables), and the
class and dev directories themselves, which hold only links.

Rows are tried in order and the first that matches decides; a row whose reach is None says the
path reaches nothing GPU-related. A pattern is `/`-separated segments, each a shell pattern of
one segment; `<pid>` is a process directory (digits, `self`, `thread-self`); a last `**`
stands for the directory itself and everything below it. `/proc/<pid>/root/...` and `cwd/...`
are judged as the host path they lead to. Paths a row does not match reach nothing.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "DEVICES",
    "EXEMPTABLE",
    "GPU_SYSFS",
    "HOST_PATHS",
    "HOST_ROOT",
    "KINDS",
    "RUNTIME",
    "VENDOR_PATHS",
    "HostPathRow",
]

DEVICES = "devices"
HOST_ROOT = "host-root"
GPU_SYSFS = "gpu-sysfs"
RUNTIME = "runtime"

# What a denial says of each kind: "host path '/sys' <this>".
KINDS: dict[str, str] = {
    DEVICES: "holds GPU device nodes",
    HOST_ROOT: "reaches the host's root filesystem, and through it /dev and its GPU device nodes",
    GPU_SYSFS: (
        "reaches the GPUs' PCI devices in sysfs or procfs (memory BARs, reset, remove, driver "
        "unbind), unguarded by device cgroups"
    ),
    RUNTIME: (
        "holds a container runtime socket, through which a container with any GPU of the node "
        "can be started"
    ),
}

# Kinds that reach only the node's GPUs (not its other pods or the host itself): a pod that
# fills every node it can run on has no other tenant's GPU there, as for privileged mode.
EXEMPTABLE = frozenset({DEVICES, GPU_SYSFS})


class HostPathRow(NamedTuple):
    pattern: str
    reach: str | None  # one of KINDS, or None: reaches nothing GPU-related
    why: str  # what is there (the docs' table)


def _run(path: str, why: str) -> list[HostPathRow]:
    """A runtime's socket path under /run, and under /var/run (a link to /run on most hosts,
    a directory of its own on some)."""
    return [HostPathRow(f"{root}{path}/**", RUNTIME, why) for root in ("/run", "/var/run")]


HOST_PATHS: tuple[HostPathRow, ...] = (
    # ---- device nodes (NVIDIA, AMD and Intel drivers' documented nodes) --------------------
    HostPathRow("/", DEVICES, "the host's root: its /dev holds every device node"),
    HostPathRow("/dev", DEVICES, "the device directory"),
    HostPathRow(
        "/dev/nvidia*/**",
        DEVICES,
        "NVIDIA: nvidia0..N, nvidiactl, nvidia-uvm, nvidia-modeset, nvidia-nvswitch*, and the "
        "MIG and IMEX channel nodes under /dev/nvidia-caps and /dev/nvidia-caps-imex-channels",
    ),
    HostPathRow(
        "/dev/dri/**", DEVICES, "DRM nodes (card*, renderD*): Intel and AMD GPUs, NVIDIA's DRM"
    ),
    HostPathRow("/dev/kfd/**", DEVICES, "AMD's compute interface (ROCm), beside /dev/dri"),
    HostPathRow("/dev/char/**", DEVICES, "links named <major>:<minor> to every character device"),
    HostPathRow("/dev/fd/**", HOST_ROOT, "a link to /proc/self/fd: open files of a host process"),
    # ---- /proc: a host process's files are the host's -------------------------------------
    HostPathRow("/proc", HOST_ROOT, "holds /proc/1/root, the host's root"),
    HostPathRow("/proc/<pid>", HOST_ROOT, "a process's directory: its root, cwd and open files"),
    HostPathRow("/proc/<pid>/root", HOST_ROOT, "the process's root: the host's, for pid 1"),
    HostPathRow("/proc/<pid>/cwd", HOST_ROOT, "the process's working directory (/ for pid 1)"),
    HostPathRow("/proc/<pid>/fd/**", HOST_ROOT, "files the process holds open, devices too"),
    HostPathRow("/proc/<pid>/map_files/**", HOST_ROOT, "files the process has mapped"),
    HostPathRow("/proc/<pid>/task", HOST_ROOT, "the process's threads, each with a root"),
    HostPathRow("/proc/bus", GPU_SYSFS, "holds /proc/bus/pci"),
    HostPathRow("/proc/bus/pci/**", GPU_SYSFS, "PCI configuration space of every device"),
    HostPathRow("/proc/**", None, "kernel settings and statistics (/proc/sys, /proc/cpuinfo...)"),
    # ---- /sys: the GPUs' PCI devices, and every link the host resolves to them ------------
    HostPathRow("/sys/fs", None, "filesystems' entries, no device"),
    HostPathRow("/sys/fs/cgroup/**", None, "cgroups"),
    HostPathRow("/sys/fs/bpf/**", None, "pinned BPF objects"),
    HostPathRow("/sys/fs/fuse/**", None, "FUSE connections"),
    HostPathRow("/sys/fs/selinux/**", None, "SELinux"),
    HostPathRow("/sys/fs/pstore/**", None, "crash logs"),
    HostPathRow(
        "/sys/fs/**", GPU_SYSFS, "other filesystems' entries may link to devices (btrfs devices/)"
    ),
    HostPathRow("/sys/kernel/security/**", None, "security modules (AppArmor, IMA)"),
    HostPathRow("/sys/kernel/tracing/**", None, "ftrace"),
    HostPathRow("/sys/kernel/mm/**", None, "memory management settings"),
    HostPathRow("/sys/kernel/config/**", None, "configfs"),
    HostPathRow(
        "/sys/kernel/**",
        GPU_SYSFS,
        "debugfs (GPU drivers' register and memory files, dri/) and iommu_groups, whose "
        "devices/ link to PCI devices",
    ),
    HostPathRow("/sys/firmware/**", None, "firmware tables"),
    HostPathRow("/sys/power/**", None, "the node's power state"),
    HostPathRow("/sys/hypervisor/**", None, "hypervisor details"),
    HostPathRow("/sys/class", None, "only class directories"),
    HostPathRow("/sys/class/*", None, "only links, which resolve inside the container"),
    HostPathRow("/sys/block", None, "only links, which resolve inside the container"),
    HostPathRow("/sys/dev", None, "only char/ and block/"),
    HostPathRow("/sys/dev/*", None, "only links, which resolve inside the container"),
    HostPathRow(
        "/sys/**",
        GPU_SYSFS,
        "devices/ (each GPU's BARs, reset, remove), bus/pci (drivers' bind and unbind, rescan), "
        "module/ and every class entry, which the host resolves into them",
    ),
    # ---- container runtime sockets (CRI and Docker API) ----------------------------------
    HostPathRow("/run", RUNTIME, "holds the runtimes' sockets"),
    HostPathRow("/var/run", RUNTIME, "holds the runtimes' sockets"),
    HostPathRow("/var", RUNTIME, "holds /var/run"),
    *_run("/containerd", "containerd (containerd.sock, and its shims' sockets)"),
    *_run("/docker.sock", "Docker"),
    *_run("/docker", "Docker (its containerd's socket, plugins)"),
    *_run("/crio", "CRI-O (crio.sock)"),
    *_run("/cri-dockerd.sock", "cri-dockerd"),
    *_run("/dockershim.sock", "the kubelet's former dockershim"),
    *_run("/k3s", "k3s and RKE2 (k3s/containerd/containerd.sock)"),
    *_run("/k0s", "k0s (containerd.sock)"),
    *_run("/podman", "Podman (podman.sock)"),
    HostPathRow("/var/snap", RUNTIME, "holds MicroK8s's containerd socket"),
    HostPathRow("/var/snap/microk8s", RUNTIME, "holds MicroK8s's containerd socket"),
    HostPathRow("/var/snap/microk8s/common", RUNTIME, "holds MicroK8s's containerd socket"),
    HostPathRow("/var/snap/microk8s/common/run/**", RUNTIME, "MicroK8s (containerd.sock)"),
)

# Device nodes of accelerators outside the default GPU list, counted when the rule set lists
# their resources as GPUs: (resource names that stand for the vendor, rows). From the vendors'
# drivers and device plugins: Intel Gaudi (habanalabs) has /dev/accel/accel<N> and
# accel_controlD<N> (/dev/hl<N> before the accel subsystem); Intel's NPU plugin hands out
# /dev/accel/accel<N>; TPU VMs expose /dev/accel<N>, or VFIO groups on later generations.
VENDOR_PATHS: tuple[tuple[tuple[str, ...], tuple[HostPathRow, ...]], ...] = (
    (
        ("habana.ai/gaudi", "habana.ai/gaudi2", "habana.ai/gaudi3"),
        (
            HostPathRow("/dev/accel*/**", DEVICES, "Intel Gaudi: accel<N>, accel_controlD<N>"),
            HostPathRow("/dev/hl*/**", DEVICES, "Intel Gaudi, older drivers: hl<N>"),
        ),
    ),
    (
        ("npu.intel.com/accel",),
        (HostPathRow("/dev/accel*/**", DEVICES, "Intel NPUs: /dev/accel/accel<N>"),),
    ),
    (
        ("google.com/tpu",),
        (
            HostPathRow("/dev/accel*/**", DEVICES, "TPU chips: /dev/accel<N>"),
            HostPathRow("/dev/vfio/**", DEVICES, "TPU chips bound to VFIO"),
        ),
    ),
)
