"""The judge's side of a CPU replay: each call's inputs, made from its secret seed, saved for the sandbox.

The replay (``grader.replay.replay_cpu``) imports no torch, so it cannot make the inputs itself. Each tensor input
is saved whole, its storage as raw bytes and its view (dtype, offset, shape, strides) as JSON, so that the
replay's ``grader.replay.host_tensor.HostTensor`` has the same bytes at the same offsets as the recorded call had.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from course import spec as specs
from course.recorder.plan_format import encode_value


def save_tensor(tensor: torch.Tensor, folder: Path, name: str) -> dict[str, Any]:
    """A CPU tensor's whole storage saved as ``<name>.npy`` (raw bytes); returns its view, as JSON."""
    storage = tensor.untyped_storage()
    raw = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,)).numpy()
    np.save(folder / f"{name}.npy", raw, allow_pickle=False)
    return {"file": f"{name}.npy", "dtype": str(tensor.dtype).removeprefix("torch."),
            "offset": tensor.storage_offset(), "shape": list(tensor.shape), "stride": list(tensor.stride())}


def with_inputs(replays: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """``replays`` (specs and their calls: shape, secret seed) with each call's inputs saved in ``folder`` and
    named, and the dtype and shape its output must have."""
    folder.mkdir(parents=True, exist_ok=True)
    done = []
    for job in replays:
        spec = specs.get(job["spec"])
        calls = []
        for n, call in enumerate(job["calls"]):
            shape = tuple(call["shape"])
            inputs = [save_tensor(value, folder, f"{spec.id}-{n}-{i}") if isinstance(value, torch.Tensor)
                      else {"scalar": encode_value(value)}
                      for i, value in enumerate(spec.make_inputs(shape, int(call["seed"]), "cpu"))]
            output = {"dtype": str(spec.output_dtype).removeprefix("torch."), "shape": list(spec.output_shape(shape))}
            calls.append({**call, "inputs": inputs, "output": output})
        done.append({**job, "calls": calls})
    return done
