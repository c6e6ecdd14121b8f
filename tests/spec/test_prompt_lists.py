"""Prompt lists: every CONTRACT format, line-numbered errors, and streaming (a 6 MB list is never whole)."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest

from ghostviewer.spec.prompt_lists import PromptListError, count_prompt_list, iter_prompt_list, read_prompt_list

EXPECTED = [{"prompt": "a red circle"}, {"prompt": "a blue square", "negative": "blurry", "seed": 3, "steps": 4,
                                          "guidance": 5.0}]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_every_format_reads_the_same_entries(tmp_path: Path) -> None:
    txt = _write(tmp_path, "p.txt", "# a comment\na red circle\n\n  a blue square  \n")
    assert read_prompt_list(txt) == [{"prompt": "a red circle"}, {"prompt": "a blue square"}]
    csv = _write(tmp_path, "p.csv", "prompt,negative,seed,steps,guidance\na red circle,,,,\n"
                                    '"a blue square",blurry,3,4,5\n')
    jsonl = _write(tmp_path, "p.jsonl", '"a red circle"\n\n{"prompt": "a blue square", "negative": "blurry", '
                                        '"seed": 3, "steps": 4, "guidance": 5}\n')
    whole = _write(tmp_path, "p.json", json.dumps(["a red circle", EXPECTED[1]], indent=2))
    for path in (csv, jsonl, whole):
        assert read_prompt_list(path) == EXPECTED, path.name
    assert read_prompt_list(_write(tmp_path, "empty.json", " [ ] ")) == []


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.csv", "prompt,seed\nfine,1\nbroken,x\n", "bad.csv line 3: seed 'x' is not a valid int"),
    ("bad2.csv", "text,seed\nfine,1\n", "bad2.csv line 1: no 'prompt' column"),
    ("bad3.csv", 'prompt,seed\nfine,1\n"unterminated,3\n', "bad3.csv: a quote opened after line 2 is never closed"),
    ("bad.jsonl", '{"prompt": "a"}\n\n{"prompt": "b",\n', "bad.jsonl line 3: not valid JSON"),
    ("bad2.jsonl", '{"prompt": "a"}\n{"text": "b"}\n', "bad2.jsonl line 2: each entry needs a 'prompt'"),
    ("bad.json", '[\n  "a",\n  {"prompt": "b", "steps": 2.5}\n]', "bad.json line 3 (entry 2): steps 2.5"),
    ("bad2.json", '[\n  "a",\n  "b"\n  "c"\n]', "bad2.json line 4: expected ',' or ']'"),
    ("bad3.json", '{"prompt": "a"}', "bad3.json line 1: a .json prompt list must hold a list"),
    ("bad4.json", '[\n"a",\n', "bad4.json line 3: the list is not closed"),
    ("list.yaml", "- a\n", "list.yaml is not a prompt list"),
])
def test_malformed_lists_name_the_file_and_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(PromptListError) as caught:
        read_prompt_list(path)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def _peak_while(fn) -> int:  # noqa: ANN001
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# A 6 MB list in 6,500 long lines (~1 kB each): its size dwarfs the memory budgets below as 100,000 short lines
# did, at a fifteenth of their per-line parsing (which tracemalloc slows five-fold).
WORDS = " with a few more words to make the line longer" * 20
LINES = 6_500


@pytest.mark.slow  # a 6 MB list written and read three times under tracemalloc
@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".json"])
def test_a_6_mb_list_is_streamed_not_loaded(tmp_path: Path, suffix: str) -> None:
    prompts = (f"prompt number {i}{WORDS}" for i in range(LINES))
    path = tmp_path / f"big{suffix}"
    if suffix == ".txt":
        path.write_text("\n".join(prompts) + "\n", encoding="utf-8")
    elif suffix == ".jsonl":
        path.write_text("\n".join(json.dumps({"prompt": p}) for p in prompts) + "\n", encoding="utf-8")
    else:
        path.write_text("[\n" + ",\n".join(json.dumps(p) for p in prompts) + "\n]", encoding="utf-8")
    size = path.stat().st_size
    assert size > 6_000_000
    items = iter_prompt_list(path)
    first: list = []
    peak = _peak_while(lambda: first.append(next(items)))
    assert first == [{"prompt": f"prompt number 0{WORDS}"}]
    assert peak < 400_000, f"reading one entry used {peak} bytes"  # the file is > 6 MB
    counted: list[int] = []
    peak = _peak_while(lambda: counted.append(count_prompt_list(path)))
    assert counted == [LINES] and peak < 1_000_000, f"counting used {peak} bytes"
    items.close()


@pytest.mark.parametrize("suffix", [".txt", ".csv", ".jsonl"])
def test_a_list_of_one_endless_line_is_refused_without_reading_it_whole(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"zeros{suffix}"
    path.write_bytes(b"\0" * 3_000_000)  # a zero-filled image named like a list
    tracemalloc.start()
    try:
        with pytest.raises(PromptListError, match=f"zeros{suffix} line 1: longer than"):
            read_prompt_list(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12_000_000  # a few buffers of 1 MiB lines, never the whole file several times over


def test_a_fifo_or_a_device_is_never_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "list.txt"
    os.mkfifo(fifo)  # opening it for reading would wait forever for a writer
    with pytest.raises(PromptListError, match="list.txt is not a regular file"):
        read_prompt_list(fifo)
    device = tmp_path / "device.txt"
    device.symlink_to("/dev/zero")
    with pytest.raises(PromptListError, match="device.txt is not a regular file"):
        read_prompt_list(device)


def test_a_binary_file_named_like_a_list_is_called_binary_not_entry_zero(tmp_path: Path) -> None:
    binary = tmp_path / "weights.jsonl"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(PromptListError, match=r"not UTF-8 text \(a binary file, or text in another encoding\)"):
        count_prompt_list(binary)
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(b"a red circle\n" * 20000 + b"\xff\xfe\n")  # past the reader's first buffer
    with pytest.raises(PromptListError, match=r"not UTF-8 text \(after entry [1-9]"):
        count_prompt_list(mixed)


@pytest.mark.parametrize("name, text, words", [
    ("deep.jsonl", '{"prompt": "x", "a": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "nested too deeply"),
    ("deep.json", "[" + "[" * 100_000 + "]" * 100_000 + "]", "nested too deeply"),
    ("twice.csv", "prompt,prompt\na,b\n", "the column 'prompt' appears twice"),
])
def test_hostile_lists_are_refused_in_one_line(tmp_path, name: str, text: str, words: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PromptListError, match=words):
        read_prompt_list(path)


def test_megabytes_of_blanks_in_a_json_list_are_skipped_quickly(tmp_path) -> None:
    import time

    path = tmp_path / "blank.json"
    path.write_text("[" + " \n" * (8 * 1024 * 1024) + '"a red circle"]')
    started = time.perf_counter()
    assert read_prompt_list(path) == [{"prompt": "a red circle"}]
    assert time.perf_counter() - started < 5  # a character-by-character loop took ~4 s for these 16 MB


def test_an_empty_prompt_is_kept_and_a_row_of_empty_cells_skipped(tmp_path: Path) -> None:
    # Found by tests/properties/test_hostile_specs.py: an entry whose prompt was "" came out with no prompt at all.
    listing = tmp_path / "list.csv"
    listing.write_text("prompt,negative\n,\n,blurry\na cat,\n", encoding="utf-8")
    assert read_prompt_list(listing) == [{"prompt": "", "negative": "blurry"}, {"prompt": "a cat"}]
    lines = tmp_path / "list.jsonl"
    lines.write_text('{"prompt": ""}\n{"prompt": "a dog", "negative": ""}\n', encoding="utf-8")
    assert read_prompt_list(lines) == [{"prompt": ""}, {"prompt": "a dog"}]
