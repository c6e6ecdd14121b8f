"""Runs history: every run and study in the runs folder, newest first, filterable; bound to HistoryModel.
A run row shows a thumbnail of its final image, its date and time, its verdict (with the first anomaly's kind
when the image passed anyway), what it changed in the pipeline (ghost, bypasses) before its prompt, and its first
anomaly.

A study is a row that expands to its child runs; a child opens like a run row (runSelected with its folder).
A run from an opened bug-report bundle is a run row tagged "[bundle NAME]". A folder that cannot be read is a
greyed row "⚠ unreadable: …" (the whole message in its tooltip); picking it says the message in the status bar
(messageRequested) and opens nothing. A run read but for a refused part (its final image) is a run row marked ⚠.

A run row's context menu: Open, Compare with… (the next run clicked in the history is B), Replay, Replay ×5,
Bisect, Export bug report…; the window connects the requests to the controller's actions. Replay is greyed out,
with the reason, when `replay_blocker(path)` names one (a bundle's run and weights that are not its own).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QIcon, QImage, QKeySequence, QPixmap, QResizeEvent, QShortcut
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QMenu,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui import messages
from ghostviewer.gui.models.history_model import BrokenEntry, HistoryModel, RunEntry, StudyChild, StudyEntry
from ghostviewer.gui.models.timeline_model import anomaly_words

STATE_COLOURS = {"ok": "#2e7d32", "done": "#2e7d32", "running": "#1565c0", "incomplete": "#ef6c00",
                 "cancelled": "#757575", "-": "#757575"}
BAD_COLOUR = "#c62828"
WARN_COLOUR = "#a86400"  # the image passed, something inside did not (the verdict badge's "warn")
PATH_ROLE = Qt.ItemDataRole.UserRole
KIND_ROLE = Qt.ItemDataRole.UserRole + 1  # "run", "study", "child" or "broken"
PROBLEM_ROLE = Qt.ItemDataRole.UserRole + 2  # what cannot be read in the row's folder ("" when nothing)
IMAGE_ROLE = Qt.ItemDataRole.UserRole + 3  # a run row's final image (its thumbnail)
UNREADABLE_COLOUR = "#8a8a8a"
COLUMNS = 6
THUMB_PX = 24
BUNDLE_COLOUR = "#6a1b9a"
REPLAY_TIMES = 5  # the menu's "Replay ×5"


def when_words(created: str) -> str:
    """'11-30 08:43' from an ISO time (in local time when it names its zone): the date and the time, always."""
    try:
        return datetime.fromisoformat(created).astimezone().strftime("%m-%d %H:%M")
    except ValueError:
        return f"{created[5:10]} {created[11:16]}".strip()


def state_colour(state: str) -> str:
    return WARN_COLOUR if state.startswith("ok · ") else STATE_COLOURS.get(state, BAD_COLOUR)


class HistoryPanel(QWidget):
    runSelected = Signal(str)  # run folder (a top-level run or a study's child run)
    studySelected = Signal(str)  # study folder
    replayRequested = Signal(str)
    replayTimesRequested = Signal(str, int)  # run folder, how many replays
    bisectRequested = Signal(str)
    exportRequested = Signal(str)
    compareRequested = Signal(str, str)  # run A (the row whose menu said "Compare with…"), run B (picked next)
    messageRequested = Signal(str)  # a line for the status bar (what to click next)

    def __init__(self, model: HistoryModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.filter = QLineEdit(placeholderText="filter by prompt, seed or result", clearButtonEnabled=True)
        self.refresh_button = QPushButton("Refresh")
        self.tree = QTreeWidget(rootIsDecorated=True, uniformRowHeights=True, sortingEnabled=False)
        self.tree.setHeaderLabels(["When", "Result", "Seed", "Steps", "Prompt", "First anomaly"])
        self.tree.setIconSize(QSize(THUMB_PX, THUMB_PX))
        for column, width in enumerate((134, 84, 44, 40, 220)):  # When: the thumbnail, the date and time
            self.tree.setColumnWidth(column, width)
        self._thumbs: dict[str, QIcon] = {}  # final image path → its thumbnail (a final image never changes)
        self.replay_blocker: Callable[[str], str] | None = None  # why a run cannot be replayed now ("": it can)
        self.compare_from: str | None = None  # run A while the user picks run B
        self.shown: str | None = None  # the run the window shows (its row is the current one)
        self._made: dict[int, tuple[object, QTreeWidgetItem]] = {}  # id(row) -> (row, its item), reused
        self._filtered = False  # some rows may be hidden by the filter
        self._needle = ""
        self._order: list[int] = []  # id() of the rows in the tree, in order
        self._by_path: dict[str, QTreeWidgetItem] = {}  # every row's and study child's item, by folder
        self._expanded: set[str] = set()  # the studies the user opened (kept across refreshes)
        self._made_live: str | None = None  # the live run the items were made for (its row says "running")
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        top = QHBoxLayout()
        top.addWidget(self.filter)
        top.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(top)
        layout.addWidget(self.tree)
        model.changed.connect(self._rebuild)
        self.filter.textChanged.connect(self._apply_filter)
        self.refresh_button.clicked.connect(model.refresh)
        self.tree.currentItemChanged.connect(self._on_current)
        self.tree.itemClicked.connect(lambda item, _column: self._picked(item))
        self.tree.itemActivated.connect(lambda item, _column: self._say_problem(item))  # again, on Enter
        self.tree.customContextMenuRequested.connect(self._menu)
        self.tree.verticalScrollBar().valueChanged.connect(lambda _v: self._show_thumbnails())
        self.tree.itemExpanded.connect(lambda item: (self._expanded.add(str(item.data(0, PATH_ROLE))),
                                                     self._show_thumbnails()))
        self.tree.itemCollapsed.connect(lambda item: self._expanded.discard(str(item.data(0, PATH_ROLE))))
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self.tree, self.cancel_compare,
                  context=Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self._rebuild()

    # -- building ---------------------------------------------------------------------------------------
    def _items(self) -> list[QTreeWidgetItem]:
        """Every item, top level and children, in display order."""
        items = []
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            items.append(item)
            items.extend(item.child(j) for j in range(item.childCount()))
        return items

    def _rebuild(self) -> None:
        """The tree from the model's rows. A row read before keeps its item (rows are immutable: the same object
        is the same row) and its place: only the new rows' items are made and inserted, so the chunks of a large
        folder's background read cost what they add, not the thousands already shown; thumbnails are drawn for
        the rows on screen only (_show_thumbnails)."""
        current = self.tree.currentItem()
        keep = current.data(0, PATH_ROLE) if current is not None else None
        live = self.model.live_run
        rows = self.model.rows
        touched = live is not None or self._made_live is not None
        reusable = {id(r) for r in rows if id(r) in self._made and self._made[id(r)][0] is r
                    and not (touched and self._live_touches(r.path, live))}
        self.tree.blockSignals(True)
        self.tree.setUpdatesEnabled(False)
        if [i for i in self._order if i in reusable] != [id(r) for r in rows if id(r) in reusable]:
            reusable = set()  # the order changed: every row again (rare: a refresh that re-sorts)
        for index in reversed(range(len(self._order))):  # the rows gone or to be made again
            if self._order[index] not in reusable:
                self.tree.takeTopLevelItem(index)
        made = {i: self._made[i] for i in reusable}
        height = max(THUMB_PX + 2, self.tree.fontMetrics().height() + 6)  # one height for every row
        pending: list[QTreeWidgetItem] = []
        for index, row in enumerate(rows):
            if id(row) in reusable:
                if pending:
                    self.tree.insertTopLevelItems(index - len(pending), pending)
                    pending = []
                continue
            item = self._item(row)
            for each in (item, *(item.child(j) for j in range(item.childCount()))):
                each.setSizeHint(0, QSize(THUMB_PX, height))
            made[id(row)] = (row, item)
            pending.append(item)
        if pending:
            self.tree.insertTopLevelItems(len(rows) - len(pending), pending)
        self._made, self._made_live, self._order = made, live, [id(r) for r in rows]
        self._by_path = {r.path: made[id(r)][1] for r in rows}
        for study in self.model.studies:
            item = made[id(study)][1]
            for j in range(item.childCount()):
                child = item.child(j)
                self._by_path.setdefault(str(child.data(0, PATH_ROLE)), child)  # a run's own row first
        for item in (made[id(r)][1] for r in rows if id(r) not in reusable):
            if item.childCount():
                item.setExpanded(str(item.data(0, PATH_ROLE)) in self._expanded)
        now = self.tree.currentItem()
        if keep is not None and (now is None or now.data(0, PATH_ROLE) != keep):
            item = self._item_of(str(keep))
            if item is not None:
                self.tree.setCurrentItem(item)
        self.tree.blockSignals(False)
        self._apply_filter(self.filter.text(), force=bool(pending) or not reusable)
        if self.shown is not None:
            self.show_current(self.shown)
        self.tree.setUpdatesEnabled(True)
        self._show_thumbnails()

    def _live_touches(self, path: str, live: str | None) -> bool:
        """The row's words depend on the live run (its own, or one inside the study), now or before."""
        return any(run is not None and (run == path or run.startswith(path + os.sep))
                   for run in (live, self._made_live))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._show_thumbnails()

    def _item(self, row: object) -> QTreeWidgetItem:
        if isinstance(row, StudyEntry):
            return self._study_item(row)
        if isinstance(row, BrokenEntry):
            return self._broken_item(row)
        return self._run_item(row)  # type: ignore[arg-type]

    def _show_thumbnails(self) -> None:
        """The final image's thumbnail of each run row on screen (read once; the others when scrolled to)."""
        tree = self.tree
        item = tree.itemAt(2, 2)
        bottom = tree.viewport().height()
        while item is not None and tree.visualItemRect(item).top() <= bottom:
            image = item.data(0, IMAGE_ROLE)
            if image and item.icon(0).isNull():
                icon = self.thumbnail(str(image))
                if icon is not None:
                    item.setIcon(0, icon)
            item = tree.itemBelow(item)

    def thumbnail(self, path: str | None) -> QIcon | None:
        if not path:
            return None
        if path not in self._thumbs:
            image = QImage(path)
            if image.isNull():
                return None
            self._thumbs[path] = QIcon(QPixmap.fromImage(image.scaled(
                THUMB_PX, THUMB_PX, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.FastTransformation)))
        return self._thumbs[path]

    def _run_item(self, entry: RunEntry) -> QTreeWidgetItem:
        state = entry.state(self.model.live_run)
        changes = f"[{' · '.join(entry.changes)}] " if entry.changes else ""
        tag = f"[bundle {entry.bundle}] " if entry.bundle else ""
        anomaly = anomaly_words(entry.first_anomaly)
        warning = "⚠ " if entry.problem else ""
        item = QTreeWidgetItem([when_words(entry.created), warning + state, str(entry.seed), str(entry.steps),
                                tag + changes + entry.prompt, anomaly])
        item.setData(0, PATH_ROLE, entry.path)
        item.setData(0, KIND_ROLE, "run")
        item.setData(0, PROBLEM_ROLE, entry.problem)
        item.setData(0, IMAGE_ROLE, entry.image)  # its thumbnail drawn once the row is on screen
        item.setToolTip(0, entry.created)
        origin = f"\nfrom the bug report {entry.bundle} (a read-only copy in {Path(entry.path).parents[1]})"
        item.setToolTip(4, changes + entry.prompt + (origin if entry.bundle else ""))
        item.setToolTip(1, "\n".join(filter(None, (entry.problem, entry.error))) or entry.path)
        item.setToolTip(5, f"first anomaly: {anomaly}" if anomaly else "no anomaly")
        item.setForeground(1, QBrush(QColor(state_colour(state))))
        if entry.changes or entry.bundle:
            item.setForeground(4, QBrush(QColor(WARN_COLOUR if entry.changes else BUNDLE_COLOUR)))
        if anomaly:
            item.setForeground(5, QBrush(QColor(BAD_COLOUR)))
        return item

    def _broken_item(self, entry: BrokenEntry) -> QTreeWidgetItem:
        folder = Path(entry.path)
        short = entry.problem.replace(str(folder.resolve()), folder.name).replace(str(folder), folder.name)
        item = QTreeWidgetItem([when_words(entry.created), entry.state(), "", "",
                                messages.HISTORY_UNREADABLE.format(problem=short), ""])
        item.setData(0, PATH_ROLE, entry.path)
        item.setData(0, KIND_ROLE, "broken")
        item.setData(0, PROBLEM_ROLE, entry.problem)
        for column in range(COLUMNS):
            item.setForeground(column, QBrush(QColor(UNREADABLE_COLOUR)))
            item.setToolTip(column, f"{entry.problem}\n{entry.path}")
        return item

    def _study_item(self, study: StudyEntry) -> QTreeWidgetItem:
        state = study.state(self.model.live_run)
        when = when_words(study.created)
        text = f"{study.kind}: {study.result}" if study.result else study.kind
        item = QTreeWidgetItem([when, state, "", study.progress, text])
        item.setData(0, PATH_ROLE, study.path)
        item.setData(0, KIND_ROLE, "study")
        item.setToolTip(0, study.created)
        item.setToolTip(1, study.error or study.path)
        item.setToolTip(3, f"{study.progress} runs done")
        item.setToolTip(4, f"{study.kind} study {study.study_id}: {study.result}")
        item.setForeground(1, QBrush(QColor(state_colour(state))))
        font = item.font(4)
        font.setBold(True)
        item.setFont(4, font)
        item.addChildren([self._child_item(child) for child in study.children])
        return item

    def _child_item(self, child: StudyChild) -> QTreeWidgetItem:
        state = child.state()
        seed = "" if child.seed is None else str(child.seed)
        item = QTreeWidgetItem([f"#{child.position}", state, seed, "", f"{child.role}: {child.label}"])
        item.setData(0, PATH_ROLE, child.path)
        item.setData(0, KIND_ROLE, "child")
        item.setToolTip(4, child.label)
        item.setToolTip(1, child.path)
        item.setForeground(1, QBrush(QColor(state_colour(state))))
        return item

    def row_count(self) -> int:
        """Top-level rows in the tree (runs, studies, unreadable folders)."""
        return self.tree.topLevelItemCount()

    def shown_count(self) -> int:
        """Top-level rows the filter leaves shown."""
        return sum(not self.tree.topLevelItem(i).isHidden() for i in range(self.tree.topLevelItemCount()))

    # -- filtering and selection ------------------------------------------------------------------------
    def _apply_filter(self, text: str, force: bool = True) -> None:
        needle = text.strip().lower()
        if not needle and not self._filtered:
            return  # nothing hidden, nothing to hide: thousands of rows left alone
        if needle and not force and needle == self._needle:
            return
        self._filtered, self._needle = bool(needle), needle

        def matches(item: QTreeWidgetItem) -> bool:
            return not needle or needle in " ".join(item.text(c) for c in range(COLUMNS)).lower()

        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            own = matches(item)
            shown_children = 0
            for j in range(item.childCount()):
                child = item.child(j)
                child.setHidden(not (own or matches(child)))
                shown_children += not child.isHidden()
            item.setHidden(not (own or shown_children))

    def select(self, path: str) -> None:
        """Make the row of this run, study or child run current (opening it)."""
        for item in self._items():
            if item.data(0, PATH_ROLE) == path:
                if item.parent() is not None:
                    item.parent().setExpanded(True)
                self.tree.setCurrentItem(item)
                return

    def show_current(self, path: str | None) -> None:
        """The run shown in the window is the current row (scrolled to, its study opened), without opening it
        again: the highlight never stays on another run (after Replay ×5 the new rows come above it)."""
        self.shown = None if path is None else str(Path(path))
        item = self._item_of(self.shown)
        if item is None:
            return
        if item.parent() is not None:
            item.parent().setExpanded(True)
        self.tree.blockSignals(True)
        self.tree.setCurrentItem(item)
        self.tree.blockSignals(False)
        self.tree.scrollToItem(item)

    def _item_of(self, path: str | None) -> QTreeWidgetItem | None:
        if path is None:
            return None
        return self._by_path.get(path) or self._by_path.get(str(Path(path)))

    def _on_current(self, item: QTreeWidgetItem | None, _previous: QTreeWidgetItem | None) -> None:
        if item is None or self._picked(item):
            return
        path, kind = str(item.data(0, PATH_ROLE)), item.data(0, KIND_ROLE)
        if kind == "study":
            item.setExpanded(True)  # a study is opened by looking at its runs
            self.studySelected.emit(path)
        elif kind != "broken":  # nothing of an unreadable folder can be shown: only its problem is said
            self.runSelected.emit(path)
        self._say_problem(item)

    def _say_problem(self, item: QTreeWidgetItem) -> None:
        problem = item.data(0, PROBLEM_ROLE)
        if problem:
            name = Path(str(item.data(0, PATH_ROLE))).name
            self.messageRequested.emit(messages.HISTORY_PROBLEM.format(name=name, problem=problem))

    # -- Compare with…: the next run clicked is B -------------------------------------------------------
    def begin_compare(self, path: str) -> None:
        self.compare_from = path
        self.messageRequested.emit(messages.COMPARE_PICK_B.format(run_id=Path(path).name))

    def cancel_compare(self) -> None:
        if self.compare_from is not None:
            self.compare_from = None
            self.messageRequested.emit(messages.COMPARE_PICK_CANCELLED)

    def _picked(self, item: QTreeWidgetItem) -> bool:
        """While picking run B: a run (or a study's run) other than A is B (True: the click is used up)."""
        if self.compare_from is None or item.data(0, KIND_ROLE) in ("study", "broken"):
            return False
        path = str(item.data(0, PATH_ROLE))
        if Path(path) == Path(self.compare_from):
            return True  # A itself: keep waiting for B
        run_a, self.compare_from = self.compare_from, None
        self.compareRequested.emit(run_a, path)
        return True

    # -- the context menu -------------------------------------------------------------------------------
    def context_menu(self, item: QTreeWidgetItem) -> QMenu:
        """The row's menu (built, not shown: the tests trigger its actions)."""
        path = str(item.data(0, PATH_ROLE))
        menu = QMenu(self)
        menu.setToolTipsVisible(True)
        if item.data(0, KIND_ROLE) == "study":
            menu.addAction("Hide runs" if item.isExpanded() else "Show runs",
                           lambda: item.setExpanded(not item.isExpanded()))
            return menu
        if item.data(0, KIND_ROLE) == "broken":
            menu.addAction("Why is it unreadable?", lambda: self._say_problem(item))
            return menu
        menu.addAction("Open", lambda: self.runSelected.emit(path))
        menu.addAction("Compare with…", lambda: self.begin_compare(path))
        menu.addSeparator()
        blocked = self.replay_blocker(path) if self.replay_blocker is not None else ""
        for text, times in (("Replay", 1), (f"Replay ×{REPLAY_TIMES}", REPLAY_TIMES)):
            action = menu.addAction(text, lambda times=times: self._replay(path, times))
            action.setEnabled(not blocked)
            action.setToolTip(blocked or f"Re-run {Path(path).name} with exactly its recorded settings"
                              + (f", {times} times" if times > 1 else ""))
        menu.addAction("Bisect", lambda: self.bisectRequested.emit(path))
        menu.addSeparator()
        menu.addAction("Export bug report…", lambda: self.exportRequested.emit(path))
        return menu

    def _replay(self, path: str, times: int) -> None:
        if times == 1:
            self.replayRequested.emit(path)
        else:
            self.replayTimesRequested.emit(path, times)

    def _menu(self, position) -> None:  # noqa: ANN001 - QPoint
        item = self.tree.itemAt(position)
        if item is not None:
            menu = self.context_menu(item)
            menu.exec(self.tree.viewport().mapToGlobal(position))
            menu.deleteLater()
