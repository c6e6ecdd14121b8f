"""Which statistic the plot shows, for which modules."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QObject, Signal

PLOT_STATS = ("absmax", "std", "mean", "nan_count", "fp16_headroom")
MAX_DEFAULT_MODULES = 6


def default_modules(modules: Sequence[str]) -> list[str]:
    """The denoiser's outer blocks (down_blocks.N, mid_block, up_blocks.N, transformer_blocks.N), a handful."""
    def is_block(name: str) -> bool:
        parts = name.split(".")
        return (len(parts) == 3 and parts[-1].isdigit()) or (len(parts) == 2 and parts[-1] == "mid_block")

    blocks = [m for m in modules if is_block(m)]
    if len(blocks) > MAX_DEFAULT_MODULES:  # keep the first and the last ones: where trouble enters and leaves
        half = MAX_DEFAULT_MODULES // 2
        blocks = blocks[:half] + blocks[-half:]
    rest = [m for m in modules if m.count(".") == 1 and m not in blocks]
    return (blocks + rest)[:MAX_DEFAULT_MODULES]


class StatSelection(QObject):
    changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.stat = "absmax"
        self.modules: list[str] = []

    def set_stat(self, stat: str) -> None:
        if stat in PLOT_STATS and stat != self.stat:
            self.stat = stat
            self.changed.emit()

    def set_modules(self, modules: Sequence[str]) -> None:
        modules = list(dict.fromkeys(modules))
        if modules != self.modules:
            self.modules = modules
            self.changed.emit()

    def toggle(self, module: str, on: bool) -> None:
        if on and module not in self.modules:
            self.set_modules([*self.modules, module])
        elif not on and module in self.modules:
            self.set_modules([m for m in self.modules if m != module])
