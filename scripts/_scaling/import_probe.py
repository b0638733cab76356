"""Import one module in a child process (probes.py runs this file's source with `python -c`) and
report whether it worked; for torch also its runtime view, so torch is imported once.
argv[1] is JSON: {"path": sys.path to use, "mark": prefix of the result line, "module": name}.
The parent sets PYTORCH_NVML_BASED_CUDA_CHECK=1 so is_available() creates no CUDA context."""

import importlib
import json
import sys
import traceback


def last_line(exc):
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def torch_runtime(torch):
    dist = importlib.import_module("torch.distributed")
    info = {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "hip_build": torch.version.hip,
        "cuda_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count(),
        "distributed_available": dist.is_available(),
    }
    if info["distributed_available"]:
        info["nccl_available"] = dist.is_nccl_available()
        info["gloo_available"] = dist.is_gloo_available()
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401

        info["fsdp2_fully_shard"] = True
    except Exception:
        info["fsdp2_fully_shard"] = False
    if torch.version.cuda and info["cuda_available"]:
        try:
            info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:
            info["nccl_version_error"] = last_line(exc)
    mps = getattr(torch.backends, "mps", None)
    info["mps_available"] = bool(mps and mps.is_available())
    return info


def probe(name):
    try:
        module = importlib.import_module(name)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from a module are facts too
        return {"error": last_line(exc)}
    out = {"module_version": str(getattr(module, "__version__", "") or "") or None}
    if name == "torch":
        try:
            out["torch_runtime"] = torch_runtime(module)
        except Exception as exc:  # the import worked; a broken runtime query is a fact about it
            out["torch_runtime"] = {"error": last_line(exc)}
    return out


def main():
    spec = json.loads(sys.argv[1])
    sys.path[:] = spec["path"]
    result = probe(spec["module"])
    print(spec["mark"] + json.dumps(result))


if __name__ == "__main__":
    main()
