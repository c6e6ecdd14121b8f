"""The block tree: component → blocks nested by path; tick a block to bypass it (Steps: a range, double-click to
edit), tick Capture to keep its feature maps; the first anomaly is marked, and so are the blocks whose outputs
drift out of the shown run's baseline (the tooltip says how far, where); right-click ▸ Isolate this module….
Bound to BlockModel."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPoint, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui.models.block_model import BlockModel, format_range, not_bypassable_reason, parse_range

NAME, KIND, CAPTURE, STEPS = range(4)
ANOMALY_MARK = "⚠ "
DRIFT_MARK = "≈ "
ANOMALY_BACKGROUND, DRIFT_BACKGROUND = "#5c1f1f", "#4d3d14"
ROLE = Qt.ItemDataRole.UserRole
ON, OFF = Qt.CheckState.Checked, Qt.CheckState.Unchecked


class BlockTree(QWidget):
    isolateRequested = Signal(str)  # a module path, from the context menu's "Isolate this module…"

    def __init__(self, model: BlockModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.filter = QLineEdit(placeholderText="filter blocks", clearButtonEnabled=True)
        self.clear = QPushButton("Clear ticks", toolTip="Untick every bypass and capture")
        self.attention = QCheckBox("Capture attention", toolTip="Record cross-attention maps per prompt token and "
                                   "self-attention entropy on the next runs (Attention dock)")
        self.note = QLabel("Tick = bypass on the next Run · Capture = keep feature maps", wordWrap=True)
        self.note.setStyleSheet("color: #888")
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Block (tick = bypass)", "Kind", "Capture", "Steps"])
        self.tree.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.tree.header().moveSection(KIND, STEPS)  # shown: Block, Capture, Steps, Kind (the ticks first)
        for column, width in ((NAME, 210), (CAPTURE, 60), (STEPS, 50), (KIND, 130)):
            self.tree.setColumnWidth(column, width)
        self.items: dict[str, QTreeWidgetItem] = {}
        self._tips: dict[str, str] = {}  # the Block column's tooltip before any drift line
        top = QHBoxLayout()
        top.addWidget(self.filter, 1)
        top.addWidget(self.attention)
        top.addWidget(self.clear)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(top)
        layout.addWidget(self.tree, 1)
        layout.addWidget(self.note)
        self.filter.textChanged.connect(self._apply_filter)
        self.clear.clicked.connect(model.clear_ticks)
        self.attention.toggled.connect(model.set_capture_attention)
        self.tree.itemChanged.connect(self._on_item_changed)
        self.tree.itemDoubleClicked.connect(self._on_double_click)
        self.tree.currentItemChanged.connect(self._on_current)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.customContextMenuRequested.connect(self._on_context_menu)
        model.blocksChanged.connect(self._rebuild)
        model.bypassChanged.connect(self._sync_ticks)
        model.captureChanged.connect(self._sync_ticks)
        model.anomalyChanged.connect(lambda _m: self._sync_ticks())
        model.driftChanged.connect(self._sync_ticks)
        model.moduleSelected.connect(self._on_selected)
        self._rebuild()

    # -- building ---------------------------------------------------------------------------------
    def _parent_for(self, module: str) -> QTreeWidgetItem:
        parts = module.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:cut])
            if prefix in self.items:
                return self.items[prefix]
        component = parts[0]
        if component not in self.items:
            item = QTreeWidgetItem(self.tree, [component])
            item.setFirstColumnSpanned(True)
            item.setData(NAME, ROLE, "")
            self.items[component] = item
        return self.items[component]

    def _rebuild(self) -> None:
        self.tree.blockSignals(True)
        self.tree.clear()
        self.items, self._tips = {}, {}
        for block in self.model.blocks:
            parent = self._parent_for(block.module)
            prefix = parent.data(NAME, ROLE) or parent.text(NAME)
            label = block.module[len(prefix) + 1:] if block.module.startswith(prefix + ".") else block.module
            item = QTreeWidgetItem(parent, [label, block.kind, "", ""])
            item.setData(NAME, ROLE, block.module)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(CAPTURE, OFF)
            if block.bypassable:
                item.setCheckState(NAME, OFF)
                self._tips[block.module] = "Tick to bypass (identity) on the next run"
                item.setToolTip(STEPS, "Double-click: bypass only these steps, START:END (e.g. 0:10)")
            else:
                item.setForeground(NAME, QBrush(QColor("#888")))
                self._tips[block.module] = not_bypassable_reason(block)
            item.setToolTip(CAPTURE, "Keep this block's output as feature maps on the next run")
            self.items[block.module] = item
        self.tree.expandToDepth(0)
        self.tree.blockSignals(False)
        self._sync_ticks()
        self._apply_filter(self.filter.text())

    def _marked(self) -> str | None:
        """The block to mark for the first anomaly: its own module, else the deepest block that holds it (an
        anomaly named inside a block: a prompt sentinel's attention at block depth, any layer at leaf depth; a
        dual-stream block's text stream, `path#text`, is that block's)."""
        anomaly = self.model.anomaly.partition("#")[0]
        holders = [m for m in self.items if anomaly == m or anomaly.startswith(m + ".")] if anomaly else []
        return max(holders, key=len) if holders else None

    def _sync_ticks(self) -> None:
        m = self.model
        marked = self._marked()
        self.tree.blockSignals(True)
        for module, item in self.items.items():
            block = m.block(module)
            if block is None:
                continue
            if block.bypassable:
                item.setCheckState(NAME, ON if module in m.bypass else OFF)
                item.setText(STEPS, format_range(m.bypass[module]) if module in m.bypass else "")
            item.setCheckState(CAPTURE, ON if module in m.capture else OFF)
            label = item.text(NAME).removeprefix(ANOMALY_MARK).removeprefix(DRIFT_MARK)
            drift = m.drift.get(module, "")
            mark, background = ((ANOMALY_MARK, ANOMALY_BACKGROUND) if module == marked else
                                (DRIFT_MARK, DRIFT_BACKGROUND) if drift else ("", ""))
            inside = f"first anomaly inside it: {m.anomaly}" if module == marked and module != m.anomaly else ""
            item.setText(NAME, mark + label)
            item.setBackground(NAME, QBrush(QColor(background)) if background else QBrush())
            item.setToolTip(NAME, "\n".join(line for line in (module, inside, drift, self._tips.get(module, ""))
                                            if line))
        self.tree.blockSignals(False)
        self.attention.setChecked(m.capture_attention)
        anomaly = self.items.get(marked or "")
        if anomaly is not None:
            self._reveal(anomaly)

    # -- user input -------------------------------------------------------------------------------
    def _on_item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        module = item.data(NAME, ROLE)
        if not module:
            return
        if column == NAME:
            if not self.model.set_bypass(module, item.checkState(NAME) == ON):
                self._sync_ticks()
        elif column == CAPTURE:
            self.model.set_capture(module, item.checkState(CAPTURE) == ON)
        elif column == STEPS:
            self._apply_steps(module, item.text(STEPS))

    def _apply_steps(self, module: str, text: str) -> None:
        try:
            steps = parse_range(text)
        except ValueError as exc:
            self.note.setText(str(exc))
            self._sync_ticks()
            return
        if not self.model.set_bypass(module, True, steps):
            self.note.setText(f"{module} cannot be bypassed")
        self._sync_ticks()

    def _on_double_click(self, item: QTreeWidgetItem, column: int) -> None:
        block = self.model.block(item.data(NAME, ROLE) or "")
        if column == STEPS and block is not None and block.bypassable:
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.tree.editItem(item, STEPS)

    def context_menu(self, module: str) -> QMenu:
        menu = QMenu(self)
        isolate = menu.addAction("Isolate this module…")
        isolate.setToolTip("Save its real inputs, weights and a standalone repro.py, and fuzz it")
        isolate.triggered.connect(lambda: self.isolateRequested.emit(module))
        return menu

    def _on_context_menu(self, pos: QPoint) -> None:
        item = self.tree.itemAt(pos)
        module = item.data(NAME, ROLE) if item is not None else None
        if module:
            self.context_menu(module).exec(self.tree.viewport().mapToGlobal(pos))

    def _on_current(self, item: QTreeWidgetItem | None, _previous: QTreeWidgetItem | None) -> None:
        if item is not None and item.data(NAME, ROLE):
            self.model.select(item.data(NAME, ROLE))

    def _on_selected(self, module: str) -> None:
        """Show the module in focus: its row, else the block it is inside, else no row at all (a pipeline step
        such as pipeline.prepare_latents is not a block) — never the previous selection."""
        item = self.nearest_item(module)
        if self.tree.currentItem() is item:
            return
        self.tree.blockSignals(True)
        if item is None:
            self.tree.setCurrentIndex(QModelIndex())
            self.tree.clearSelection()
        else:
            self.tree.setCurrentItem(item)
        self.tree.blockSignals(False)
        if item is not None:
            self._reveal(item)

    def nearest_item(self, module: str) -> QTreeWidgetItem | None:
        parts = module.split(".") if module else []
        for cut in range(len(parts), 0, -1):
            item = self.items.get(".".join(parts[:cut]))
            if item is not None:
                return item
        return None

    def _reveal(self, item: QTreeWidgetItem) -> None:
        parent = item.parent()
        while parent is not None:
            parent.setExpanded(True)
            parent = parent.parent()
        self.tree.scrollToItem(item)

    def _apply_filter(self, text: str) -> None:
        needle = text.strip().lower()
        shown = [m for m in self.items if self.model.block(m) is not None and needle in m.lower()]
        for module, item in self.items.items():
            if self.model.block(module) is not None:
                item.setHidden(bool(needle) and not any(s == module or s.startswith(module + ".") for s in shown))
