"""A TorchDispatchMode base that leaves Dynamo unimported until something else imports it.

torch wraps each mode's ``__torch_dispatch__`` in ``torch._disable_dynamo``, whose first call imports
``torch._dynamo``: 1.7 s of CPU in every process that records a launch plan or guards a kernel, most of
a small notebook's grading on a CPU. Keeping Dynamo out of a frame only matters while Dynamo runs, and it
cannot run before it is imported, so this base takes torch's wrap only once ``torch._dynamo`` is loaded
(a notebook that calls ``torch.compile`` loads it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class LazyDynamoDispatchMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # torch's own wrap, at class creation; __init_subclass__ below wraps lazily instead

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        raw = cls.__dict__.get("__torch_dispatch__")
        if raw is None:
            return
        disabled: list[Callable[..., Any]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, N807
            if "torch._dynamo" not in sys.modules:
                return raw(self, func, types, args, kwargs)
            if not disabled:
                disabled.append(torch._disable_dynamo(raw, recursive=True))
            return disabled[0](self, func, types, args, kwargs)

        __torch_dispatch__.__doc__ = raw.__doc__
        cls.__torch_dispatch__ = __torch_dispatch__
