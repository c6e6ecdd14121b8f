"""A record's JSON values: `dumps` writes most values with json directly and converts only where needed; its text
is always that of the converted copy (jsonable), whatever the value holds."""

from __future__ import annotations

import enum
import json
import math
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from ghostviewer.record.sqlite_store import dumps, jsonable, loads


class Level(enum.IntEnum):
    LOW = 1


VALUES = [
    {"prompt": "a red circle", "steps": 20, "guidance": 7.5, "sizes": (64, 64), "none": None, "flag": True},
    {"nested": [{"a": [1, 2.5, "x"]}, OrderedDict(b=1)], "empty": {}, "list": []},
    {1: "int key", 2.5: "float key", "s": "str key"},
    {True: "bool key", None: "none key", False: 0},  # json would write true/null: the copy's text wins
    {"text": 'a prompt with "true": in it', "null": None},
    {"nan": float("nan"), "inf": [math.inf, -math.inf]},
    {"numpy": np.float32(1.5), "np_int": np.int64(3), "array": np.arange(3), "np_float64": np.float64(0.1)},
    {"path": Path("/tmp/x"), "set": {1}, "enum": Level.LOW, Level.LOW: "enum key"},
    {"ünïcödé": "日本語", "emoji": "🙂"},
    {(1, 2): "tuple key"},
    [1, "two", None, 3.0],
    "plain text",
    12,
    None,
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_writes_the_converted_copys_text(value: object) -> None:
    expected = json.dumps(jsonable(value), allow_nan=False, ensure_ascii=False)
    assert dumps(value) == expected
    assert loads(dumps(value)) == json.loads(expected)
