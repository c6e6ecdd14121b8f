"""A settings file that is garbage — binary bytes, a version that is no number, JSON nested deeper than Python
decodes — is read as defaults, never a crash of the window before it appears (the deep JSON was a RecursionError)."""

from __future__ import annotations

from pathlib import Path

from ghostviewer.gui.app_settings import AppSettings


def test_a_garbage_settings_file_reads_as_defaults(tmp_path: Path) -> None:
    ini = tmp_path / "settings.ini"
    deep = "[" * 100_000 + "]" * 100_000
    ini.write_bytes(b"[General]\nversion=\xff\xfenot a number\nprompt=\"" + deep.encode() + b"\"\n"
                    b"recent=\"{oops\"\n\x00\x01\x02 binary tail \xff\n")
    settings = AppSettings(ini)
    assert settings.get_json("prompt", {}) == {}
    assert settings.get_json("recent", []) == []
    assert settings.qsettings.value("version") is not None  # migrated and rewritten, not refused
