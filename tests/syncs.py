"""Counting, on the CPU, what would make a GPU forward wait: ops whose result the host must read
(a tensor's value in Python: `.item()`, `bool(t)`, `if t.all():`; ops whose output size depends
on the data) and copies to the host (`.numpy()`, `.tolist()`, `.cpu()`)."""

from __future__ import annotations

import contextlib
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

WAITS = {
    aten._local_scalar_dense.default,  # .item(), float(t), int(t)
    aten.is_nonzero.default,  # bool(t): `if mask.all():`
    aten.item.default,
    aten.equal.default,
    aten.nonzero.default,  # output sizes read from the data
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_consecutive.default,
}
"""Ops that read a device tensor's value on the host (a host-device sync on a GPU)."""

HOST_READS = ("numpy", "tolist", "cpu")


class Syncs(TorchDispatchMode):
    """Inside `with Syncs() as s:`, `s.waits` counts the WAITS ops run and `s.host` the host
    reads of tensors (`Tensor.numpy`, `.tolist`, `.cpu`), each by name in `s.seen`."""

    def __init__(self):
        super().__init__()
        self.seen: Counter[str] = Counter()
        self.waits = self.host = 0
        self._patches = contextlib.ExitStack()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in WAITS:
            self.waits += 1
            self.seen[str(func)] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        for name in HOST_READS:
            original = getattr(torch.Tensor, name)

            def counted(t, *a, _original=original, _name=name, **kw):
                self.host += 1
                self.seen[_name] += 1
                return _original(t, *a, **kw)

            setattr(torch.Tensor, name, counted)
            self._patches.callback(setattr, torch.Tensor, name, original)
        return super().__enter__()

    def __exit__(self, *exc):
        self._patches.close()
        return super().__exit__(*exc)
