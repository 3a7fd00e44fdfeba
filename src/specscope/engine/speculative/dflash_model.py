"""The DFlash block drafter as a torch module, its JSON config, and its safetensors file.

DFlash (Chen, Liang, Liu 2026) drafts a whole block in ONE forward: the block is
[anchor, MASK x (B-1)] at positions start..start+B-1, attention inside it is bidirectional,
and slot k's output predicts the token at its own position start+k. It is conditioned on the
target: the outputs of a few target layers are concatenated per context token, projected by
one linear layer (`fc`) and normalised into one "context feature", and every draft layer
injects that feature as extra keys/values (its own k/v projections applied to the context
features, then to the block), so the block's queries see the target's view of the context.
Context features get no query, output projection or MLP of their own.

The drafter owns only its layers, `fc`, the norms and a learned mask embedding: the token
embedding and the LM head are the target's, passed in by the caller (shared, frozen), which is
why a drafter for SmolLM2-135M is a few MB. Training (engine/training/) and inference
(dflash.py) call the same three methods: `fuse`, `context_kv`, `block_hidden`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specscope.engine.model import MLP, ModelConfig, RMSNorm, rope_inv_freq, rotate_half
from specscope.engine.speculative.draft_vocab import DraftHead

FORMAT = "specscope-dflash/1"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
#: Shipped drafters, by the name `--drafter dflash:NAME` accepts (folders next to this package).
SHIPPED = {"smollm2": "dflash-smollm2-135m"}
SHIPPED_ROOT = Path(__file__).resolve().parents[1] / "weights"


def default_target_layers(num_layers: int, num_taps: int) -> list[int]:
    """Layers spread uniformly from the second to the third-to-last (the DFlash default);
    for shallow targets (tests) over all layers."""
    lo, hi = (1, num_layers - 3) if num_layers >= 8 else (0, num_layers - 1)
    if num_taps <= 1:
        return [(lo + hi) // 2]
    ids = {round(lo + i * (hi - lo) / (num_taps - 1)) for i in range(num_taps)}
    return sorted(ids)


@dataclass
class DFlashConfig:
    target_name: str
    target_vocab_size: int
    target_hidden_size: int
    target_num_layers: int
    target_layer_ids: list[int]
    block_size: int = 16
    num_layers: int = 1
    num_heads: int = 8
    num_kv_heads: int = 4
    head_dim: int = 64
    intermediate_size: int = 1536
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # Tokens the drafter may propose (draft_vocab.py): 0 = the target's whole vocabulary; else
    # that many ids, kept in the weights file as `draft_vocab` (int64, sorted).
    draft_vocab_size: int = 0
    format: str = FORMAT
    training: dict[str, Any] = field(default_factory=dict)  # how it was trained (the card's gist)

    @classmethod
    def for_target(
        cls,
        name: str,
        cfg: ModelConfig,
        *,
        num_layers: int = 1,
        block_size: int = 16,
        num_taps: int = 5,
    ) -> DFlashConfig:
        """A drafter shaped like the target's own layers (its heads, head size and MLP width)."""
        return cls(
            target_name=name,
            target_vocab_size=cfg.vocab_size,
            target_hidden_size=cfg.hidden_size,
            target_num_layers=cfg.num_layers,
            target_layer_ids=default_target_layers(cfg.num_layers, num_taps),
            block_size=block_size,
            num_layers=num_layers,
            num_heads=cfg.num_heads,
            num_kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            intermediate_size=cfg.intermediate_size,
            rms_norm_eps=cfg.rms_norm_eps,
            rope_theta=cfg.rope_theta,
        )

    def __post_init__(self) -> None:
        if self.format != FORMAT:
            raise ValueError(f"not a {FORMAT} drafter config (format {self.format!r})")
        if self.block_size < 2 or self.num_layers < 1 or not self.target_layer_ids:
            raise ValueError(
                "a DFlash drafter needs block_size >= 2, >= 1 layer and >= 1 tapped layer"
            )
        if any(not 0 <= t < self.target_num_layers for t in self.target_layer_ids):
            raise ValueError(
                f"tapped layers {self.target_layer_ids} outside the target's "
                f"0..{self.target_num_layers - 1}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if not 0 <= self.draft_vocab_size <= self.target_vocab_size:
            raise ValueError(
                f"draft_vocab_size {self.draft_vocab_size} outside 0..{self.target_vocab_size}"
            )

    def model_config(self) -> ModelConfig:
        """The engine's config type for the shared pieces (MLP width, RoPE)."""
        return ModelConfig(
            vocab_size=self.target_vocab_size,
            hidden_size=self.target_hidden_size,
            intermediate_size=self.intermediate_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=self.rope_theta,
        )

    def check_target(self, cfg: ModelConfig) -> None:
        """Refuse a target this drafter was not made for (shapes must match to share weights)."""
        got = (cfg.vocab_size, cfg.hidden_size, cfg.num_layers)
        want = (self.target_vocab_size, self.target_hidden_size, self.target_num_layers)
        if got != want:
            raise ValueError(
                f"DFlash drafter was made for a target with vocabulary, hidden size, "
                f"layers = {want}; this target has {got}"
            )


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


def grouped_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """Attention as two batched matmuls, the queries of each key head stacked as one matrix:
    q [B, H, Q, d], keys/values [B, KVH, C, d], mask [B, 1, Q, C] (bool; None = all visible)
    -> [B, H, Q, d]; what `scaled_dot_product_attention(..., enable_gqa=True)` computes.

    Why: a served block has 16 queries over a context of ~500 rows. cuDNN's fused kernel
    (what SDPA picks on the H100) spends 36 us a layer on that (the fifth device session's
    profile), the math path's float32 matmuls as long; stacked, each product is one small
    bf16 matmul (~3 us in the same profile's projections), the mask and a float32 softmax one
    fused kernel when compiled. The scores are rounded to the inputs' dtype before the float32
    softmax."""
    b, h, nq, d = q.shape
    kvh, width = keys.shape[1], keys.shape[2]
    group = h // kvh
    scores = torch.matmul(q.reshape(b, kvh, group * nq, d), keys.transpose(-1, -2))
    scores = scores.float().view(b, kvh, group, nq, width) * d**-0.5
    if mask is not None:
        scores = scores.masked_fill(~mask[:, :, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(values.dtype).view(b, kvh, group * nq, width)
    return torch.matmul(probs, values).view(b, h, nq, d)


class DFlashLayer(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        d_model, h, kvh, d = c.target_hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
        self.h, self.kvh, self.d = h, kvh, d
        self.input_layernorm = RMSNorm(d_model, c.rms_norm_eps)
        self.q_proj = nn.Linear(d_model, h * d, bias=False)
        self.k_proj = nn.Linear(d_model, kvh * d, bias=False)
        self.v_proj = nn.Linear(d_model, kvh * d, bias=False)
        self.o_proj = nn.Linear(h * d, d_model, bias=False)
        self.q_norm = RMSNorm(d, c.rms_norm_eps)
        self.k_norm = RMSNorm(d, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(d_model, c.rms_norm_eps)
        self.mlp = MLP(c.model_config())

    def kv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (k-normed, rotated) and values [B, N, kv_heads, head_dim] of features x [B, N, D]."""
        k = self.k_norm(self.k_proj(x).unflatten(-1, (self.kvh, self.d)))
        return _rope(k, cos, sin), self.v_proj(x).unflatten(-1, (self.kvh, self.d))

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        ctx_k: torch.Tensor,
        ctx_v: torch.Tensor,
        mask: torch.Tensor | None,
        attention: str = "sdpa",
    ) -> torch.Tensor:
        b, q, _ = x.shape
        h = self.input_layernorm(x)
        xq = _rope(self.q_norm(self.q_proj(h).unflatten(-1, (self.h, self.d))), cos, sin)
        bk, bv = self.kv(h, cos, sin)
        keys = torch.cat([ctx_k, bk], dim=1).transpose(1, 2)
        values = torch.cat([ctx_v, bv], dim=1).transpose(1, 2)
        if attention == "grouped":
            out = grouped_attention(xq.transpose(1, 2), keys, values, mask)
        else:
            out = F.scaled_dot_product_attention(
                xq.transpose(1, 2), keys, values, attn_mask=mask, enable_gqa=True
            )
        x = x + self.o_proj(out.transpose(1, 2).reshape(b, q, self.h * self.d))
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.config = c
        d_model = c.target_hidden_size
        self.fc = nn.Linear(len(c.target_layer_ids) * d_model, d_model, bias=False)
        self.hidden_norm = RMSNorm(d_model, c.rms_norm_eps)
        # The MASK slots' input: learned (no reserved token id needed in the target's vocab).
        self.mask_embedding = nn.Parameter(torch.zeros(d_model))
        self.layers = nn.ModuleList(DFlashLayer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(d_model, c.rms_norm_eps)
        self.register_buffer("inv_freq", rope_inv_freq(c.model_config()), persistent=False)
        # The draft vocabulary's target ids (set by training or loaded with the weights).
        self.draft_vocab: torch.Tensor | None
        if c.draft_vocab_size:
            self.register_buffer("draft_vocab", torch.zeros(c.draft_vocab_size, dtype=torch.long))
        else:
            self.draft_vocab = None

    def draft_head(self, head_weight: torch.Tensor) -> DraftHead:
        """The target's LM head (`head_weight`, [vocab, D]) over this drafter's vocabulary.
        Gathered once and kept while the head and the vocabulary stay the same tensors,
        unchanged (the trainer asks at every step; a gather of 16k rows is ~20 ms on a CPU)."""
        ids = self.draft_vocab
        versions = (_version(head_weight), _version(ids), torch.is_inference_mode_enabled())
        kept = getattr(self, "_head_kept", None)
        if kept is None or kept[0] is not head_weight or kept[1] is not ids or kept[2] != versions:
            self._head_kept = (head_weight, ids, versions, DraftHead(head_weight, ids))
        return self._head_kept[3]

    def init_weights(self, seed: int, embed_std: float) -> None:
        """Random initialisation (seeded): linear layers N(0, 0.02), the mask embedding at the
        target's embedding scale so the first layer sees inputs of the usual size."""
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.data = torch.randn(p.shape, generator=g).mul_(0.02).to(p.dtype)
        self.mask_embedding.data = torch.randn(self.mask_embedding.shape, generator=g).mul_(
            embed_std
        )

    def rope(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, N, 1, head_dim] for absolute positions [B, N]."""
        angles = positions.to(torch.float32)[..., None] * self.inv_freq.to(positions.device)
        angles = torch.cat([angles, angles], dim=-1)[:, :, None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        """Target context features [.., n_taps * D] -> one feature per token [.., D]."""
        return self.hidden_norm(self.fc(taps))

    def context_kv(
        self, fused: torch.Tensor, positions: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's keys/values of the fused context features [B, N, D] at positions [B, N]."""
        cos, sin = self.rope(positions, fused.dtype)
        return [layer.kv(fused, cos, sin) for layer in self.layers]

    def block_hidden(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        ctx: list[tuple[torch.Tensor, torch.Tensor]],
        mask: torch.Tensor | None,
        attention: str = "sdpa",
    ) -> torch.Tensor:
        """Block inputs x [B, Q, D] at positions [B, Q], attending to the context keys/values
        `ctx` and to the block under `mask` [B, 1, Q, C + Q] (bool; None = all visible), by
        `attention` (one of DRAFT_ATTENTION, checked by the drafter and the options that name
        it: the trainer's long rows take SDPA's fused kernels, a served block on CUDA the
        grouped matmuls, dflash_block.block_attention); returns the final-normed hidden states
        for the target's LM head."""
        cos, sin = self.rope(positions, x.dtype)
        for layer, (k, v) in zip(self.layers, ctx, strict=True):
            x = layer(x, cos, sin, k, v, mask, attention)
        return self.norm(x)


def _version(t: torch.Tensor | None) -> int | None:
    """A tensor's in-place change counter (inference tensors have none: they change only in
    inference mode, which the head's key holds too)."""
    return None if t is None or t.is_inference() else t._version


def with_draft_vocab(model: DFlashDraftModel, ids: torch.Tensor) -> DFlashDraftModel:
    """A drafter with `model`'s weights (its device, dtype and mode) that drafts only over
    `ids`, sorted distinct target ids: a trained drafter restricted afterwards."""
    restricted = DFlashDraftModel(replace(model.config, draft_vocab_size=len(ids)))
    state = {k: v for k, v in model.state_dict().items() if k != "draft_vocab"}
    restricted.load_state_dict({**state, "draft_vocab": torch.as_tensor(ids, dtype=torch.long)})
    param = model.fc.weight
    return restricted.to(param.device, param.dtype).train(model.training)


# -- files --------------------------------------------------------------------------------------


def resolve_path(ref: str) -> Path:
    """`dflash:` argument -> folder: a shipped name ("smollm2", or "" for it) or a path."""
    name = ref or "smollm2"
    path = SHIPPED_ROOT / SHIPPED[name] if name in SHIPPED else Path(name).expanduser()
    if not (path / CONFIG_FILE).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(
            f"DFlash drafter {ref!r}: expected {CONFIG_FILE} and {WEIGHTS_FILE} "
            f"in {path} (train one: python -m specscope.engine.train_dflash)"
        )
    return path


def save(model: DFlashDraftModel, folder: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """config.json + model.safetensors (the drafter's own parameters in `dtype`, and its
    draft vocabulary's ids as they are)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous()
        for k, v in model.state_dict().items()
    }
    save_file(state, str(folder / WEIGHTS_FILE), metadata={"format": FORMAT})
    (folder / CONFIG_FILE).write_text(json.dumps(asdict(model.config), indent=1) + "\n")
    return folder


def read_config(folder: Path) -> DFlashConfig:
    """A saved drafter's config alone; a clear ValueError for one that is not (OSError where
    the file is missing)."""
    try:
        return DFlashConfig(**json.loads((folder / CONFIG_FILE).read_text()))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{folder / CONFIG_FILE}: not a DFlash drafter config ({exc})") from exc


def load(
    folder: Path | str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> DFlashDraftModel:
    """A saved drafter; a clear ValueError for a config or tensor that does not fit."""
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = read_config(folder)
    model = DFlashDraftModel(cfg)
    state = load_file(str(folder / WEIGHTS_FILE))
    try:
        model.load_state_dict(
            {k: v.float() if v.is_floating_point() else v for k, v in state.items()}, strict=True
        )
    except RuntimeError as exc:
        raise ValueError(f"{folder / WEIGHTS_FILE} does not match its config: {exc}") from exc
    ids = model.draft_vocab
    if ids is not None and (
        bool((ids[1:] <= ids[:-1]).any())
        or int(ids[0]) < 0
        or int(ids[-1]) >= cfg.target_vocab_size
    ):
        raise ValueError(
            f"{folder / WEIGHTS_FILE}: draft_vocab is not sorted distinct ids of the target's "
            f"0..{cfg.target_vocab_size - 1}"
        )
    return model.to(device=device, dtype=dtype).eval()
