"""Server flavors: how each server family wants a streamed request and what its stream says."""

from __future__ import annotations

from specscope.probe.flavors.base import Decoder, Delta, Flavor, HttpRequest, StreamError
from specscope.probe.flavors.llamacpp import LlamaCppFlavor
from specscope.probe.flavors.openai import OpenAIFlavor
from specscope.probe.flavors.sglang import SGLangFlavor
from specscope.probe.flavors.vllm import VLLMFlavor

FLAVORS: dict[str, type[Flavor]] = {
    "openai": OpenAIFlavor,
    "sglang": SGLangFlavor,
    "vllm": VLLMFlavor,
    "llamacpp": LlamaCppFlavor,
}


def make_flavor(name: str, api: str | None = None, model: str | None = None) -> Flavor:
    """A flavor by name; raises ValueError for an unknown name or an API it does not serve."""
    try:
        cls = FLAVORS[name]
    except KeyError:
        raise ValueError(
            f"unknown flavor {name!r} (expected one of {', '.join(FLAVORS)})"
        ) from None
    flavor = cls(api=api, model=model)
    if flavor.api not in flavor.supported_apis:
        raise ValueError(
            f"flavor {name!r} does not serve api {flavor.api!r} "
            f"(expected one of {', '.join(flavor.supported_apis)})"
        )
    return flavor


__all__ = ["FLAVORS", "Decoder", "Delta", "Flavor", "HttpRequest", "StreamError", "make_flavor"]
