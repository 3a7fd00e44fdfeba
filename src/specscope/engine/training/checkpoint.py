"""Stopping and resuming a training run: its state in safetensors parts small enough to move.

A GPU session runs commands of at most ten minutes and brings back files of at most 16 MiB, so
a run must stop on time (`--stop-after-minutes`), continue where it stopped (`--resume`), and
leave a state that travels in parts. The state is what makes the continuation equal to an
uninterrupted run: the drafter's fp32 parameters, AdamW's moments and step counts, the numpy
and torch RNG states and the loop's record (curve, accuracies, held-out points), plus the step
and total step count (the learning rate is a function of them). Tensors go into numbered
safetensors files of at most `PART_BYTES`, a tensor split across files where it must be, the
JSON state too (as bytes); the first file's header says where each piece lies, with its
sha256, so a missing or damaged part is one clear error. No file beside the parts: a 2-layer
SmolLM2 drafter's state is 8 files, what one device call brings back. Never pickle (weights only from safetensors
or GGUF: the project's rule). The run's settings kept in the meta make resuming with other
settings an error naming them instead of a silently different run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

FORMAT = "specscope-dflash-checkpoint/1"
PART_BYTES = 15_000_000  # a part file's size bound (a 2-layer SmolLM2 drafter's state: 8 parts)
HEADER_ROOM = 131_072  # of which kept for the part's safetensors header (part 1: the layout)
META = "meta"  # the JSON state, stored as a uint8 tensor: any size, split and checked like the rest


class Stopped(Exception):
    """The run stopped at its time limit (`--stop-after-minutes`) with its progress saved;
    `--resume` continues it."""


@dataclass
class RunControl:
    """How long this call may run and where its checkpoints go (nothing the weights depend
    on, so none of it is in the settings a resume compares)."""

    folder: Path | None = None  # checkpoints (None: none written, no resume)
    resume: bool = False
    stop_at: float | None = None  # time.perf_counter() after which the run stops at a step
    every_s: float = 300.0  # seconds between checkpoints (0: only at a stop and at the end)

    def past_stop(self) -> bool:
        return self.stop_at is not None and time.perf_counter() > self.stop_at


def _digest(piece: torch.Tensor) -> str:
    return hashlib.sha256(piece.contiguous().view(torch.uint8).numpy()).hexdigest()[:16]


def _pack(tensors: dict[str, torch.Tensor], budget: int) -> tuple[list[dict], dict[str, Any]]:
    """Tensors into parts of at most `budget` bytes: (the parts' {key: flat piece}, per tensor
    its shape and [part, key, sha256] pieces)."""
    parts: list[dict[str, torch.Tensor]] = [{}]
    used, layout = 0, {}
    for name, tensor in tensors.items():
        flat = tensor.detach().to("cpu").contiguous().view(-1)
        pieces, at = [], 0
        while at < flat.numel() or not pieces:
            room = (budget - used) // flat.element_size()
            if room == 0:
                parts.append({})
                used = 0
                continue
            piece = flat[at : at + room].clone()
            key = f"{name}#{len(pieces)}"
            parts[-1][key] = piece
            pieces.append([len(parts) - 1, key, _digest(piece)])
            used += piece.numel() * piece.element_size()
            at += piece.numel()
        layout[name] = {"shape": list(tensor.shape), "pieces": pieces}
    return parts, layout


def save_parts(
    folder: Path,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
    part_bytes: int = PART_BYTES,
) -> None:
    """`tensors` and the JSON `meta` into numbered files in `folder` (the layout in the first
    file's header), replacing what was there only once all is written: a run killed while
    saving keeps its previous checkpoint."""
    from safetensors.torch import save_file

    blob = torch.frombuffer(bytearray(json.dumps(meta).encode()), dtype=torch.uint8)
    parts, layout = _pack({**tensors, META: blob}, part_bytes - HEADER_ROOM)
    names = [f"state-{i + 1:05d}-of-{len(parts):05d}.safetensors" for i in range(len(parts))]
    head = json.dumps({"format": FORMAT, "files": names, "tensors": layout})
    if len(head) > HEADER_ROOM // 2:
        raise ValueError(f"checkpoint layout of {len(layout)} tensors does not fit one header")
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for i, (name, part) in enumerate(zip(names, parts, strict=True)):
        save_file(
            part,
            str(tmp / name),
            metadata={"format": FORMAT, **({"layout": head} if i == 0 else {})},
        )
    old = folder.with_name(folder.name + ".old")
    if folder.exists():
        folder.replace(old)
    tmp.replace(folder)
    shutil.rmtree(old, ignore_errors=True)


def _open_part(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors' own error types differ across versions
        raise ValueError(f"checkpoint part {path} is missing or damaged ({exc})") from exc


def _layout(folder: Path) -> dict[str, Any]:
    """The layout in the first part's header; FileNotFoundError where there is no checkpoint."""
    from safetensors import safe_open

    first = sorted(folder.glob("state-00001-of-*.safetensors"))
    if len(first) != 1:
        raise FileNotFoundError(f"{folder}: no checkpoint to resume from")
    try:
        with safe_open(str(first[0]), "pt") as f:
            layout = json.loads((f.metadata() or {}).get("layout", "{}"))
    except Exception as exc:
        raise ValueError(f"checkpoint part {first[0]} is damaged ({exc})") from exc
    if layout.get("format") != FORMAT:
        raise ValueError(f"{first[0]}: not a {FORMAT} checkpoint")
    return layout


def _assemble(folder: Path, layout: dict, name: str, parts: dict[int, dict]) -> torch.Tensor:
    """Tensor `name` from its pieces (parts read on demand into `parts`), each checked."""
    pieces = []
    for p, key, digest in layout["tensors"][name]["pieces"]:
        path = folder / layout["files"][p]
        if p not in parts:
            parts[p] = _open_part(path)
        if key not in parts[p] or _digest(parts[p][key]) != digest:
            raise ValueError(f"checkpoint part {path} is missing or damaged ({key})")
        pieces.append(parts[p][key])
    return torch.cat(pieces).view(layout["tensors"][name]["shape"])


def read_meta(folder: Path) -> dict[str, Any]:
    """The checkpoint's JSON state alone (what a resume checks before it loads anything)."""
    blob = _assemble(folder, _layout(folder), META, {})
    return json.loads(blob.numpy().tobytes())


def load_parts(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, meta) of `save_parts`; ValueError naming the part that is missing or damaged."""
    layout, parts = _layout(folder), {}
    tensors = {name: _assemble(folder, layout, name, parts) for name in layout["tensors"]}
    return tensors, json.loads(tensors.pop(META).numpy().tobytes())


def save_training(
    folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, meta: dict[str, Any]
) -> None:
    """The model's parameters, the optimiser's state and torch's RNG states, with `meta`."""
    sd = opt.state_dict()
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    for idx, state in sd["state"].items():
        tensors.update({f"opt.{idx}.{k}": torch.as_tensor(v) for k, v in state.items()})
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    save_parts(folder, tensors, {**meta, "param_groups": sd["param_groups"]})


def load_training(
    folder: Path, model: torch.nn.Module, opt: torch.optim.Optimizer
) -> dict[str, Any]:
    """`save_training` undone into `model` and `opt` (and torch's RNG); returns the meta."""
    tensors, meta = load_parts(folder)
    model.load_state_dict(
        {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    )
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    opt.load_state_dict({"state": state, "param_groups": meta.pop("param_groups")})
    torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    return meta


def export_drafter(folder: Path, out: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """The drafter of the checkpoint in `folder` as `--drafter dflash:OUT` reads it
    (config.json + model.safetensors in `out`): a 2-layer drafter's file (17.5 MB in bf16) is
    over what a device call brings back, its checkpoint's parts are not."""
    from specscope.engine.speculative import dflash_model

    tensors, meta = load_parts(folder)
    st = meta["ident"]["settings"]
    training = {"steps": meta["total"], "seed": st["seed"], "gamma": st["gamma"]}
    if meta["step"] != meta["total"]:
        training["checkpoint_step"] = meta["step"]
    model = dflash_model.DFlashDraftModel(
        dflash_model.DFlashConfig(**meta["ident"]["drafter"], training=training)
    )
    model.load_state_dict(
        {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    )
    return dflash_model.save(model, out, dtype=dtype)
