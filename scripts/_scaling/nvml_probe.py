"""NVML facts, read in a child process (probes.py runs this file's source with `python -c`), so a
hanging driver cannot hang the check. argv[1] is JSON: {"path": sys.path to use, "mark": prefix of
the one result line}. Prints one marked JSON line; never raises."""

import json
import sys

TOPOLOGY_LEVELS = {
    0: "same board",
    10: "single PCIe switch",
    20: "multiple PCIe switches",
    30: "host bridge",
    40: "same NUMA node",
    50: "across NUMA nodes (SYS)",
}


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def call(fn, *args):
    """fn(*args), or None when NVML raises (not supported, lost GPU, ...)."""
    try:
        return fn(*args)
    except Exception:
        return None


def mib(value):
    return value // 2**20 if value is not None else None


def device_facts(nv, index, handle):
    mem = call(nv.nvmlDeviceGetMemoryInfo, handle)
    cc = call(nv.nvmlDeviceGetCudaComputeCapability, handle)
    mig = call(nv.nvmlDeviceGetMigMode, handle)
    pci = call(nv.nvmlDeviceGetPciInfo, handle)
    procs = call(nv.nvmlDeviceGetComputeRunningProcesses, handle) or []
    max_links = getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)
    links = sum(call(nv.nvmlDeviceGetNvLinkState, handle, i) == 1 for i in range(max_links))
    device = {
        "index": index,
        "name": text(call(nv.nvmlDeviceGetName, handle)),
        "uuid": text(call(nv.nvmlDeviceGetUUID, handle)),
        "pci_bus_id": text(pci.busId) if pci else None,
        "memory_total_mib": mib(mem.total) if mem else None,
        "memory_used_mib": mib(mem.used) if mem else None,
        "memory_free_mib": mib(mem.free) if mem else None,
        "compute_capability": "{}.{}".format(*cc) if cc else None,
        "mig_enabled": bool(mig[0]) if mig else False,
        "nvlink_active_links": links,
        "processes": [{"pid": p.pid, "used_memory_mib": mib(p.usedGpuMemory or 0)} for p in procs],
        "mig_devices": [],
    }
    if device["mig_enabled"]:
        device["mig_devices"] = mig_slices(nv, handle)
    return device


def mig_slices(nv, handle):
    slices = []
    for j in range(call(nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        mig = call(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, j)
        if mig is None:
            continue
        mem = call(nv.nvmlDeviceGetMemoryInfo, mig)
        slices.append(
            {
                "uuid": text(call(nv.nvmlDeviceGetUUID, mig)),
                "memory_total_mib": mib(mem.total) if mem else None,
            }
        )
    return slices


def topology(nv, handles):
    nvlink_caps = getattr(nv, "NVML_P2P_CAPS_INDEX_NVLINK", 3)
    pairs = []
    for x, (i, hi) in enumerate(handles):
        for j, hj in handles[x + 1 :]:
            level = call(nv.nvmlDeviceGetTopologyCommonAncestor, hi, hj)
            p2p = call(nv.nvmlDeviceGetP2PStatus, hi, hj, nvlink_caps)
            link = TOPOLOGY_LEVELS.get(level, level)
            pairs.append({"a": i, "b": j, "link": link, "nvlink": p2p == 0})
    return pairs


def collect(nv):
    out = {"driver_version": text(call(nv.nvmlSystemGetDriverVersion)), "devices": []}
    cuda = call(
        getattr(nv, "nvmlSystemGetCudaDriverVersion_v2", None)
        or getattr(nv, "nvmlSystemGetCudaDriverVersion", None)
    )
    out["cuda_driver_version"] = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None
    handles = []
    for i in range(call(nv.nvmlDeviceGetCount) or 0):
        handle = call(nv.nvmlDeviceGetHandleByIndex, i)
        if handle is None:  # e.g. a GPU that fell off the bus: report it, keep the others
            out["devices"].append({"index": i, "name": None, "error": "no NVML handle"})
            continue
        handles.append((i, handle))
        out["devices"].append(device_facts(nv, i, handle))
    out["topology"] = topology(nv, handles)
    return out


def main():
    spec = json.loads(sys.argv[1])
    sys.path[:] = spec["path"]
    try:
        import pynvml as nv
    except Exception as exc:
        result = {"error": f"nvidia-ml-py not importable: {exc}", "no_nvml": True}
    else:
        try:
            nv.nvmlInit()
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}", "init_failed": True}
        else:
            result = collect(nv)
            call(nv.nvmlShutdown)
    print(spec["mark"] + json.dumps(result))


if __name__ == "__main__":
    main()
