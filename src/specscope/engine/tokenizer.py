"""Text <-> token ids and the chat template, for GGUF metadata or a Hugging Face folder.

GGUF carries a gpt2-style byte-level BPE (vocab + merges) and a Jinja chat template; we rebuild
them as a `tokenizers.Tokenizer` (the same library transformers uses, so no hand-written BPE) and
render the template in a sandboxed Jinja environment, as transformers does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

# Pre-tokenizer regexes by GGUF `tokenizer.ggml.pre` name (as in llama.cpp's llama-vocab.cpp).
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GGUF_TOKEN_CONTROL, GGUF_TOKEN_USER_DEFINED = 3, 4


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):  # digits split one by one, then gpt2 regex
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("llama-bpe", "llama3", "smaug-bpe"):
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    if pre in ("gpt2", "default", ""):
        return byte_level
    raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r} (supported: smollm, gpt2, llama-bpe)")


def tokenizer_from_gguf_fields(
    tokens: list[str], merges: list[str], token_types: list[int], pre: str
) -> Tokenizer:
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    tok.pre_tokenizer = _pre_tokenizer(pre)
    tok.decoder = decoders.ByteLevel()
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, kind in zip(tokens, token_types, strict=True)
        if kind in (GGUF_TOKEN_CONTROL, GGUF_TOKEN_USER_DEFINED)
    ]
    tok.add_special_tokens(special)
    return tok


@dataclass
class TextCodec:
    """Tokenizer + chat template + stop ids: everything `Backend` needs about text."""

    tokenizer: Tokenizer
    chat_template: str | None
    eos_ids: set[int]
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False
    bos_id: int | None = None
    _template: Any = field(default=None, repr=False)

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if self.add_bos and self.bos_id is not None:
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special)

    def render_chat(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool = True
    ) -> str:
        if not self.chat_template:
            # No template shipped: a plain transcript keeps the endpoint usable.
            lines = [f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages]
            return "\n".join(lines) + ("\nassistant:" if add_generation_prompt else "")
        if self._template is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise ValueError(message)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = raise_exception
            self._template = env.from_string(self.chat_template)
        return self._template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        # The rendered template already holds any BOS text; special tokens parse as one id each.
        return self.tokenizer.encode(self.render_chat(messages), add_special_tokens=False).ids


def codec_from_hf_folder(folder: Path, config: dict[str, Any]) -> TextCodec:
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tcfg_path = folder / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text()) if tcfg_path.exists() else {}

    def token_text(v: Any) -> str:
        return v.get("content", "") if isinstance(v, dict) else (v or "")

    eos = config.get("eos_token_id")
    eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    gen_path = folder / "generation_config.json"
    if gen_path.exists():
        g = json.loads(gen_path.read_text()).get("eos_token_id")
        eos_ids |= set(g if isinstance(g, list) else [g] if g is not None else [])
    eos_token = token_text(tcfg.get("eos_token"))
    if eos_token and tok.token_to_id(eos_token) is not None:
        eos_ids.add(tok.token_to_id(eos_token))
    template = tcfg.get("chat_template")
    if isinstance(template, list):  # named templates: take the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    bos_token = token_text(tcfg.get("bos_token"))
    return TextCodec(
        tokenizer=tok,
        chat_template=template,
        eos_ids=eos_ids,
        bos_token=bos_token,
        eos_token=eos_token,
        add_bos=bool(tcfg.get("add_bos_token", False)),
        bos_id=tok.token_to_id(bos_token) if bos_token else None,
    )


class CodecText:
    """The engine's text side (tokenizer, chat template, stop ids) without the model: what a
    server in another process than the engine needs (serve/engine_process.py sends it to the
    HTTP side once, pickled, so that both sides tokenize with the one codec the engine loaded)."""

    def __init__(self, codec: TextCodec):
        self.codec = codec

    def tokenize(self, text: str) -> list[int]:
        return self.codec.encode(text)

    def detokenize(self, ids: list[int]) -> str:
        return self.codec.decode(ids)

    def apply_chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        return self.codec.chat_ids(messages)

    def eos_token_ids(self) -> set[int]:
        return set(self.codec.eos_ids)
