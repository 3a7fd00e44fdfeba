"""Next-token choice from logits: greedy, or temperature + top-p with a per-request generator.

Per request (not batched) because requests in one batch carry different parameters; the cost
is one vocabulary-sized softmax per request per step, small beside the forward.
"""

from __future__ import annotations

import torch


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    g = torch.Generator(device="cpu")  # CPU generator: same seed, same tokens on any device
    g.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
    return g


def probabilities(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution sampling draws from (float32, on CPU); also what speculative
    rejection sampling must compare against."""
    probs = torch.softmax(logits.float().cpu() / max(temperature, 1e-6), dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
        drop = sorted_p.cumsum(-1) - sorted_p >= top_p
        sorted_p[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        probs /= probs.sum(-1, keepdim=True)
    return probs


def sample(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator
) -> int:
    """One token id from a [vocab] logits row."""
    if temperature <= 0.0:
        return int(logits.argmax())
    return int(torch.multinomial(probabilities(logits, temperature, top_p), 1, generator=generator))
