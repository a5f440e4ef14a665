"""A byte-level fast tokenizer built locally (no hub download) for the tiny and shape presets.

Every UTF-8 byte is one token (ids 0..255), plus ``<|endoftext|>`` (256, also BOS/EOS) and
``<pad>`` (257). Encoding adds no special tokens (ByT5's tokenizer appends ``</s>`` to every encode,
which breaks lm-eval's continuation scoring; see docs/pitfalls.md §7), and ``decode(encode(s)) == s`` for
any string.
"""
from __future__ import annotations

from functools import lru_cache

BYTE_VOCAB = 256
EOS_ID = 256
PAD_ID = 257
VOCAB_SIZE = 258


@lru_cache(maxsize=1)
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (the alphabet of the ByteLevel pre-tokenizer)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    mapping = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def build_byte_tokenizer():
    """A ``PreTrainedTokenizerFast`` over raw bytes (vocab 258). Deterministic, offline, fast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    b2u = _byte_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab["<|endoftext|>"] = EOS_ID
    vocab["<pad>"] = PAD_ID
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    # No regex split: one byte = one token regardless of whitespace, and no prefix space is invented.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<pad>",
        model_max_length=1 << 30,
        clean_up_tokenization_spaces=False,
    )
    fast.add_special_tokens({"additional_special_tokens": []})
    return fast


def byte_ids(text: str):
    """The byte tokenizer's ids of ``text`` as a [n] int64 tensor, without building the tokenizer:
    one id per UTF-8 byte, no special tokens (the same ids as ``build_byte_tokenizer()``; tested)."""
    import torch

    raw = text.encode("utf-8")
    if not raw:
        return torch.zeros(0, dtype=torch.int64)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)
