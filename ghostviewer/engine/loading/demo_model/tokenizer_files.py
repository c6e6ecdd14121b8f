"""Write a CLIP BPE vocabulary in which every demo-caption word is a single token.

CLIP's BPE splits a word into characters (the last one suffixed with ``</w>``) and applies merges by rank.
We emit, for each word, the chain of merges that rebuilds it left to right, so the tokenizer files are tiny and
ordinary: any CLIP tokenizer reads them with ``from_pretrained``.
"""

from __future__ import annotations

import json
from pathlib import Path

BOS, EOS = "<|startoftext|>", "<|endoftext|>"
MAX_LENGTH = 32


def build_vocab(words: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    pieces: list[str] = []
    merges: list[tuple[str, str]] = []

    def add(piece: str) -> None:
        if piece not in seen:
            seen.add(piece)
            pieces.append(piece)

    seen: set[str] = set()
    # Every printable ASCII character, alone and word-final, so unknown words still tokenize to something.
    for code in range(33, 127):
        add(chr(code))
    for code in range(33, 127):
        add(chr(code) + "</w>")
    for word in words:
        symbols = list(word[:-1]) + [word[-1] + "</w>"]
        current = symbols[0]
        for symbol in symbols[1:]:
            merge = (current, symbol)
            if merge not in merges:
                merges.append(merge)
            current = current + symbol
            add(current)
    add(BOS)
    add(EOS)
    return {piece: index for index, piece in enumerate(pieces)}, merges


def write_tokenizer_files(folder: Path, words: list[str]) -> dict[str, int]:
    """Write vocab.json, merges.txt and the tokenizer configs; return the vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab, merges = build_vocab(words)
    (folder / "vocab.json").write_text(json.dumps(vocab, indent=0), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = {
        "tokenizer_class": "CLIPTokenizer",
        "model_max_length": MAX_LENGTH,
        "bos_token": BOS,
        "eos_token": EOS,
        "unk_token": EOS,
        "pad_token": EOS,
        "do_lower_case": True,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    special = {"bos_token": BOS, "eos_token": EOS, "unk_token": EOS, "pad_token": EOS}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2), encoding="utf-8")
    return vocab
