"""The pipeline's blocks and what the user ticked on them: bypass (with an optional step range), capture; the
first anomaly of the shown run and the blocks whose outputs drift out of the baseline it was judged by (read off
the GUI thread: drift_marks on a Worker); and the module in focus (shared by the tree, the heat map and the
feature maps)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

from ghostviewer.analysis.baseline import Drift, drift_by_module
from ghostviewer.analysis.baseline_store import recorded_baseline_key, recorded_channel_means, run_baseline
from ghostviewer.gui.link.worker import Worker
from ghostviewer.record import RecordError
from ghostviewer.spec.bypass import StepRange, format_steps, parse_steps


@dataclass(frozen=True)
class BlockInfo:
    module: str
    kind: str
    bypassable: bool

    @property
    def component(self) -> str:
        return self.module.split(".", 1)[0]


def not_bypassable_reason(block: BlockInfo) -> str:
    return (f"A {block.kind} cannot be bypassed: its output does not have its input's shape and it has no "
            "shortcut path to keep (zero residual), so there is nothing sound to pass through. "
            "Bypass a block inside it.")


def parse_range(text: str) -> StepRange:
    """'' or 'all' → (None, None); '5:12', ':8', '3:' → a range; ValueError on anything else."""
    return parse_steps(text)


format_range = format_steps


def drift_marks(record: Any, modules: list[str] | None = None) -> dict[str, str]:
    """{module: 'drift: std z=9.6 at step 0'} for a run's modules (`modules`: only these) whose outputs leave the
    envelope of the baseline the run recorded it was judged by (read as JSON, analysis/baseline.py); the first
    anomaly keeps the figure the run recorded. {} when the run used no baseline or it cannot be read now.
    A worker thread calls this."""
    if record is None:
        return {}
    marks: dict[str, str] = {}
    try:
        anomaly = record.first_anomaly or {}
        baseline = run_baseline(record.path, recorded_baseline_key(record.events(kind="baseline")))
        if baseline is not None:
            rows = record.stats(module=modules) if modules else record.stats()
            drifts = drift_by_module(rows, baseline, recorded_channel_means(record))
            marks = {module: drift.describe() for module, drift in drifts.items()}
    except RecordError:
        return {}
    if anomaly.get("kind") == "drift" and anomaly.get("module") and anomaly.get("z") is not None:
        step = anomaly.get("step")
        marks[str(anomaly["module"])] = Drift(float(anomaly["z"]), str(anomaly.get("stat") or "?"),
                                              str(anomaly.get("phase")), None if step is None else int(step)).describe()
    return marks


class BlockModel(QObject):
    blocksChanged = Signal()
    bypassChanged = Signal()
    captureChanged = Signal()
    anomalyChanged = Signal(str)  # the module of the shown run's first anomaly ("" when none)
    driftChanged = Signal()  # the shown run's drifting blocks
    moduleSelected = Signal(str)

    def __init__(self, parent: QObject | None = None, *, synchronous: bool = False) -> None:
        super().__init__(parent)
        self.blocks: list[BlockInfo] = []
        self.bypass: dict[str, StepRange] = {}
        self.capture: set[str] = set()
        self.capture_attention = False  # cross-attention maps per token and self-attention entropy
        self.anomaly = ""
        self.drift: dict[str, str] = {}  # block -> 'drift: std z=9.6 at step 0', for the shown run
        self.selected = ""
        self._drift_run: str | None = None  # the run whose drift marks are shown, or being read
        self._drifts = Worker(1, latest=True, synchronous=synchronous, what="reading the drift marks", parent=self)
        self._drifts.answered.connect(self._on_drift)

    def set_blocks(self, blocks: list[dict[str, Any]]) -> None:
        """The engine's `blocks` event payload; ticks on blocks the new pipeline lacks are dropped."""
        self.blocks = [BlockInfo(str(b["module"]), str(b.get("kind", "")), bool(b.get("bypassable")))
                       for b in blocks if isinstance(b, dict) and b.get("module")]
        known = {b.module for b in self.blocks}
        self.bypass = {m: r for m, r in self.bypass.items() if m in known}
        self.capture &= known
        self.blocksChanged.emit()

    def block(self, module: str) -> BlockInfo | None:
        return next((b for b in self.blocks if b.module == module), None)

    def set_bypass(self, module: str, on: bool, steps: StepRange | None = None) -> bool:
        """Tick or untick a bypass; False (nothing changes) for a block that cannot be bypassed."""
        block = self.block(module)
        if on and (block is None or not block.bypassable):
            return False
        if on:
            new = steps if steps is not None else self.bypass.get(module, (None, None))
            if self.bypass.get(module) == new:
                return True
            self.bypass[module] = new
        elif self.bypass.pop(module, None) is None:
            return True
        self.bypassChanged.emit()
        return True

    def set_capture(self, module: str, on: bool) -> None:
        if on == (module in self.capture):
            return
        if on:
            self.capture.add(module)
        else:
            self.capture.discard(module)
        self.captureChanged.emit()

    def set_capture_attention(self, on: bool) -> None:
        if bool(on) != self.capture_attention:
            self.capture_attention = bool(on)
            self.captureChanged.emit()

    def clear_ticks(self) -> None:
        """Every tick off: bypasses, captures and Capture attention (all of them change the next run)."""
        if self.bypass or self.capture or self.capture_attention:
            self.bypass, self.capture, self.capture_attention = {}, set(), False
            self.bypassChanged.emit()
            self.captureChanged.emit()

    def set_anomaly(self, module: str) -> None:
        if module != self.anomaly:
            self.anomaly = module
            self.anomalyChanged.emit(module)

    def set_drift(self, marks: dict[str, str]) -> None:
        """The shown run's drifting modules and the line that says how (drift_marks)."""
        if marks != self.drift:
            self.drift = dict(marks)
            self.driftChanged.emit()

    def show_run(self, record: Any) -> None:
        """The shown run (a RunRecord, None: none): its first anomaly now, its drifting blocks once read
        (driftChanged); another run's marks are cleared at once."""
        anomaly = (record.first_anomaly if record is not None else None) or {}
        self.set_anomaly(str(anomaly.get("module") or ""))
        run = None if record is None else str(record.path)
        if run != self._drift_run:
            self._drift_run = run
            self.set_drift({})
        if record is None:
            self._drifts.cancel()
            return
        modules = [b.module for b in self.blocks] or None
        self._drifts.submit(run, lambda _task: drift_marks(record, modules))  # the newest wins

    @property
    def drift_loading(self) -> bool:
        """The shown run's drift marks are being read."""
        return self._drifts.busy

    def _on_drift(self, run: Any, marks: Any) -> None:
        if run == self._drift_run:
            self.set_drift(marks if isinstance(marks, dict) else {})  # a failure: the log has it

    def select(self, module: str) -> None:
        if module != self.selected:
            self.selected = module
            self.moduleSelected.emit(module)

    def run_fields(self) -> dict[str, Any]:
        """`bypass`, `capture` and `capture_attention` for the next queued run's settings (RunSpec specs,
        in block order)."""
        order = {b.module: i for i, b in enumerate(self.blocks)}
        bypass = sorted(self.bypass, key=lambda m: order.get(m, len(order)))
        specs = [m if self.bypass[m] == (None, None) else f"{m}@{format_range(self.bypass[m])}" for m in bypass]
        return {"bypass": specs, "capture": sorted(self.capture, key=lambda m: order.get(m, len(order))),
                "capture_attention": self.capture_attention}
