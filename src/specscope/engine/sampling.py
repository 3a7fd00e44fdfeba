"""Next-token choice from logits: greedy, or temperature + top-p with a per-request generator.

The distribution is computed for all sampled rows of a step at once, on the logits' device,
and each row's token drawn by inverse CDF from ONE uniform taken from its request's own CPU
generator. So a request's tokens depend only on its logits, its parameters and its seed: alike
alone or in any batch, and a step of 256 sampled requests (the trainer's sampled responses)
costs one softmax and one copy back, not 256 of each as a per-row draw on the host would.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    g = torch.Generator(device="cpu")  # CPU generator: same seed, same uniforms on any device
    g.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
    return g


def distribution(
    logits: torch.Tensor, temperature: float | Sequence[float], top_p: float | Sequence[float]
) -> torch.Tensor:
    """softmax(logits / temperature) cut to the smallest prefix (by probability) whose mass
    reaches top_p (always at least the top token) and renormalised: float32 rows [..., V] on
    the logits' device. `temperature` and `top_p`: numbers, or one value per row of 2-D logits
    (a top_p of 1 or more leaves that row whole; read on the host, so nothing is read back)."""
    dev = logits.device
    temp = torch.tensor(temperature, dtype=torch.float32, device=dev).clamp_min(1e-6)
    probs = torch.softmax(logits.float() / (temp[:, None] if temp.ndim else temp), dim=-1)
    per_row_top = isinstance(top_p, Sequence)
    tops = list(top_p) if per_row_top else [top_p]
    if all(p >= 1.0 for p in tops):
        return probs
    keep = torch.tensor([p if p < 1.0 else torch.inf for p in tops], device=dev)
    keep = keep[:, None] if per_row_top else keep[0]
    sorted_p, order = probs.sort(dim=-1, descending=True)
    sorted_p = sorted_p.masked_fill(sorted_p.cumsum(-1) - sorted_p >= keep, 0.0)
    probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    return probs / probs.sum(-1, keepdim=True)


def probabilities(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution sampling draws from (float32, on CPU); also what speculative
    rejection sampling must compare against."""
    return distribution(logits.float().cpu(), temperature, top_p)


def sample_rows(
    logits: torch.Tensor,
    temperatures: Sequence[float],
    top_ps: Sequence[float],
    generators: Sequence[torch.Generator],
) -> list[int]:
    """One token id per row of [R, V] logits, each row with its own temperature (> 0), top_p
    and generator: the first index whose cumulative probability (float64) passes the row's
    uniform. A token of zero probability is never chosen."""
    if not generators:
        return []
    probs = distribution(logits, list(temperatures), list(top_ps))
    cdf = probs.double().cumsum(-1)
    uniforms = torch.cat([torch.rand(1, generator=g, dtype=torch.float64) for g in generators])
    point = uniforms.to(logits.device)[:, None] * cdf[:, -1:]
    chosen = torch.searchsorted(cdf, point, right=True)[:, 0]
    return chosen.clamp_(max=logits.shape[-1] - 1).tolist()


class RowDraws:
    """One draw from each row of [R, V] logits, all with one request's temperature, top_p and
    generator, made when first read (`draws[row]`): on CUDA every row at the first read (one
    batched draw and one copy back of R ids: a read per row would wait on the device each
    time); on the CPU row by row as read (a row never read costs nothing). The speculative tree
    verify reads the rows its walk reaches (verify.verify_tree_sampled)."""

    def __init__(
        self, logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator
    ):
        self.logits, self.temperature, self.top_p = logits, temperature, top_p
        self.generator = generator
        self.drawn: dict[int, int] = {}

    def __getitem__(self, row: int) -> int:
        if row not in self.drawn:
            rows = range(self.logits.shape[0]) if self.logits.is_cuda else [row]
            picks = sample_rows(
                self.logits[rows[0] : rows[-1] + 1],
                [self.temperature] * len(rows),
                [self.top_p] * len(rows),
                [self.generator] * len(rows),
            )
            self.drawn.update(zip(rows, picks, strict=True))
        return self.drawn[row]
