"""Loading a Hugging Face folder: a tiny Llama written by transformers' own `save_pretrained`
(config.json + model.safetensors), with llama3 RoPE scaling and untied head, must give the same
logits in our engine as in transformers. Pickle-only folders are refused."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models

from specscope.engine.kv_cache import KVCache
from specscope.engine.loader import load_checkpoint, load_model
from specscope.engine.model import ForwardBatch, NewTokens

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("tiny-llama")
    cfg = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_theta=50000.0,
        tie_word_embeddings=False,
        eos_token_id=3,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(folder, safe_serialization=True)
    Tokenizer(models.BPE(vocab={"a": 0, "b": 1}, merges=[])).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "{{ messages[0]['content'] }}"})
    )
    return folder, model


def test_hf_folder_logits_match_transformers(hf_folder):
    folder, hf = hf_folder
    lm = load_model(str(folder), device="cpu")
    assert lm.config.rope_scaling and lm.config.rope_scaling["rope_type"] == "llama3"
    assert not lm.config.tie_word_embeddings and 3 in lm.codec.eos_ids
    ids = torch.randint(0, 128, (300,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.inference_mode():
        ref = hf(torch.tensor([ids])).logits[0]
    c = lm.config
    kv = KVCache(
        num_layers=c.num_layers,
        num_kv_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        num_pages=40,
        page_size=8,
    )
    seq = kv.admit("r", 300)
    slots = kv.alloc_slots(seq, 300)
    ours = lm.model(
        ForwardBatch.pack(
            [NewTokens(ids, list(range(300)), slots, kv.context_slots(seq))], "cpu", kv.pad_slot
        ),
        kv,
    )[0]
    torch.testing.assert_close(
        ours, ref, rtol=1e-4, atol=1e-4
    )  # positions past 64 exercise the scaling


def test_pickle_only_folder_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "vocab_size": 8,
                "hidden_size": 8,
                "intermediate_size": 8,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
            }
        )
    )
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_checkpoint(tmp_path)
