"""Live tensor-storage accounting on any device (CPU included), for memory-estimate checks.

A ``TorchDispatchMode`` sees every tensor an aten op returns; each new storage is logged with its
byte size, and a weakref finalizer logs its release. Categories are assigned after the fact (a
storage that ends up as ``param.grad`` is a gradient for its whole life, one created inside the
optimizer step is optimizer memory), and the log is replayed to get the peak of every category and
the breakdown at the moment of the overall peak. Replaying avoids the misattribution an online
tracker makes when a gradient is produced by an op before autograd stores it in ``.grad``.

``torch.distributed._tools.mem_tracker.MemTracker`` (torch 2.13) does the same online, but it
registers a grad hook on every parameter and so raises on frozen ones (LoRA), and it refuses a
second forward of the same module without a reset; hence this small tracker.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only
from torch.utils.weak import WeakIdKeyDictionary

PARAM, BUFFER, GRAD, OPT, ACT = "param", "buffer", "grad", "opt", "act"
CATEGORIES = (PARAM, BUFFER, GRAD, OPT, ACT)


class StorageLog(TorchDispatchMode):
    """Log allocations and releases of tensor storages; categorise them; replay for peaks."""

    def __init__(self) -> None:
        super().__init__()
        self._ids = WeakIdKeyDictionary()  # UntypedStorage -> (id, weakref keeping the finalizer)
        self._events: list[tuple[int, int]] = []  # (storage id, +bytes or -bytes)
        self._category: dict[int, str] = {}
        self._next_id = 0
        self._default = ACT

    # ------------------------------------------------------------------ recording

    def _storage_id(self, tensor: torch.Tensor, category: str | None = None) -> int | None:
        if tensor.device.type == "meta" or tensor.is_sparse:
            return None
        storage = tensor.untyped_storage()
        known = self._ids.get(storage)
        if known is not None:
            return known[0]
        sid = self._next_id
        self._next_id += 1
        nbytes = storage.nbytes()
        events = self._events
        ref = weakref.ref(storage, lambda _ref, sid=sid, n=nbytes: events.append((sid, -n)))
        self._ids[storage] = (sid, ref)
        self._category[sid] = category or self._default
        events.append((sid, nbytes))
        return sid

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tree_map_only(torch.Tensor, self._storage_id, out)
        return out

    def track(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        """Register tensors that already exist (model parameters, buffers) or re-label them."""
        for tensor in tensors:
            sid = self._storage_id(tensor, category)
            if sid is not None:
                self._category[sid] = category

    def mark_grads(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Label the storages currently held in ``.grad`` as gradients (call after backward)."""
        self.track((p.grad for p in params if p.grad is not None), GRAD)

    @contextlib.contextmanager
    def labelled(self, category: str):
        """Storages first seen inside the block get ``category`` (e.g. the optimizer step)."""
        previous, self._default = self._default, category
        try:
            yield
        finally:
            self._default = previous

    # ------------------------------------------------------------------ replay

    def replay(self) -> dict:
        """Per-category live bytes now, per-category peaks, and the breakdown at the total peak."""
        live = dict.fromkeys(CATEGORIES, 0)
        peak = dict.fromkeys(CATEGORIES, 0)
        total = best = 0
        at_peak = dict(live)
        for sid, delta in self._events:
            category = self._category[sid]
            live[category] += delta
            total += delta
            if delta > 0:
                peak[category] = max(peak[category], live[category])
                if total > best:
                    best, at_peak = total, dict(live)
        return {"current": live, "peak": peak, "total_peak": best, "at_total_peak": at_peak}
