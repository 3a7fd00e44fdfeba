"""build_backend(options): what `specscope serve --backend engine` and the embedded default call.

Options are an `EngineOptions` (engine/options.py), or the same as loose keyword flags (the
CLI's names, validated: an unknown flag is an error). `--device cuda` takes the fast path
(paged attention kernel + CUDA graphs per batch bucket) unless `cuda_graphs` is False.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from specscope.engine.backend import EngineBackend
from specscope.engine.faults import EagerAbove
from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import LoadedModel, load_model
from specscope.engine.options import EngineOptions
from specscope.engine.runner import EagerRunner, Runner
from specscope.engine.speculative.setup import make_stepper
from specscope.engine.stepper import PlainStepper, Stepper

CPU_POOL_CAP_TOKENS = 16384  # ~0.75 GB of fp32 K/V for SmolLM2-135M
GPU_POOL_CAP_TOKENS = 262144


def build_backend(options: EngineOptions | None = None, /, **flags: Any) -> EngineBackend:
    opts = options if options is not None else EngineOptions.from_flags(**flags)
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device")
    loaded = load_model(opts.model or "smollm2", device=opts.device)
    cfg = loaded.config
    pool_tokens = opts.kv_pool_tokens
    if pool_tokens is None:
        cap = GPU_POOL_CAP_TOKENS if opts.device == "cuda" else CPU_POOL_CAP_TOKENS
        pool_tokens = min(opts.max_batch * cfg.max_position_embeddings, cap)
    kv = KVCache.for_model(
        cfg,
        pool_tokens=pool_tokens // opts.page_size * opts.page_size or opts.page_size,
        page_size=opts.page_size,
        policy=opts.kv_alloc,
        dtype=loaded.dtype,
        device=loaded.device,
        seed=opts.seed or 0,
    )
    return assemble(loaded, kv, opts)


def build_served_backend(**flags: Any) -> EngineBackend:
    """`build_backend` inside `serve`'s engine process (serve/engine_process.py). On the CPU,
    one torch thread unless OMP_NUM_THREADS says otherwise: a process's main thread with
    torch's default (one per core) spins when the cores are shared, 4.2 s a batch-8 step of
    SmolLM2 against 0.09 s with one thread (2 shared cores, load ~8, 2026-12-04); the engine
    stepped by a thread of the server's own process did not show it."""
    opts = EngineOptions.from_flags(**flags)
    if opts.device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    return build_backend(opts)


def assemble(
    loaded: LoadedModel, kv: KVCache, opts: EngineOptions, *, warmup: bool = True
) -> EngineBackend:
    """The backend for a loaded model and its KV cache: stepper from the speculation options,
    runner from the device (benches and tests build their cache, then call this)."""
    graphs = loaded.device.type == "cuda" and opts.cuda_graphs
    stepper: Stepper = (
        PlainStepper()
        if opts.speculation is None
        else make_stepper(
            loaded, kv, opts.speculation, cuda_graphs=graphs, torch_compile=opts.torch_compile
        )
    )
    runner: Runner | None = None
    if graphs:
        from specscope.engine.cuda.graph_runner import CudaGraphRunner

        # A drafter conditioned on the target's hidden states reads them from every target
        # forward (Runner.forward_hidden): the captured graphs return the tapped layers' too.
        if CudaGraphRunner.can_tap(loaded.model, stepper.target_taps):
            graph_runner = CudaGraphRunner(
                loaded.model,
                kv,
                max_batch=opts.max_batch,
                max_nodes=stepper.max_nodes,
                compile=opts.torch_compile,
                gemv=opts.single_token_gemv,
                taps=stepper.target_taps,
            )
            if warmup:
                graph_runner.warmup()
            runner = graph_runner
            if opts.graph_off_above is not None:
                runner = EagerAbove(graph_runner, graph_runner.eager, opts.graph_off_above)
    backend = EngineBackend(
        loaded,
        kv,
        stepper,
        runner=runner or EagerRunner(loaded.model, kv),
        max_batch=opts.max_batch,
        seed=opts.seed,
        overlap=opts.overlap if opts.overlap is not None else loaded.device.type == "cuda",
    )
    backend.info.extra.update(graph_statement(runner, opts))
    return backend


def graph_statement(runner: Runner | None, opts: EngineOptions) -> dict[str, Any]:
    """What the server states about its CUDA graphs beside `fast_path` (the runner's class):
    the largest batch they cover (`graph_max_batch`), so that a diagnosis does not take graphs
    that stop below the running batch for graphs on every step (causes._graph_mode), and the
    engine's faults as given (`engine_faults`: the record of a seeded run; no rule reads it).
    On CPU there are no graphs, and `graph-off-above` is stated as having nothing to act on."""
    out: dict[str, Any] = {}
    faults = [*(opts.speculation.faults if opts.speculation else ())]
    if opts.graph_off_above is not None:
        faults.insert(0, f"graph-off-above={opts.graph_off_above}")
    if isinstance(runner, EagerAbove):
        cover = min(runner.max_graph_batch, runner.fast.buckets[-1])  # type: ignore[attr-defined]
        out["graph_max_batch"] = cover
        out["fast_path"] = f"CUDA graphs up to batch {cover}, eager forward above"
    elif runner is not None:  # the graph runner: every batch up to its largest bucket
        out["graph_max_batch"] = runner.buckets[-1]  # type: ignore[attr-defined]
    elif opts.graph_off_above is not None:
        faults[0] += " (no CUDA graphs on this device: no effect)"
    if faults:
        out["engine_faults"] = ", ".join(faults)
    return out
