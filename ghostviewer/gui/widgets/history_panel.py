"""Runs history: every run and study in the runs folder, newest first, filterable; bound to HistoryModel.
A run row shows a thumbnail of its final image, its date and time, its verdict (with the first anomaly's kind
when the image passed anyway), what it changed in the pipeline (ghost, bypasses) before its prompt, and its first
anomaly.

A study is a row that expands to its child runs; a child opens like a run row (runSelected with its folder).
A watch study (the calls a watcher recorded in the user's own program) says its program, calls, failures and kept
records ("watch app.py: 1/4 failed (25%), 4 kept"); its children are its kept calls, newest first, each with its
thumbnail, the time of the call and "call 7 · prompt" (the study row names the program; the whole source is in the
tooltip: the history dock is narrow); a watched run listed on its own (a bundle's) says "[watched: app.py · call
7]". While the history watches a folder, a line above the tree says so (with Stop), and each refresh updates the
rows in place: the current row, the studies opened and the scroll position stay as they were (the rows on screen
do not move when new ones come above).
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
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSizePolicy,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui import messages
from ghostviewer.gui.models.history_model import BrokenEntry, HistoryModel, RunEntry, StudyChild, StudyEntry
from ghostviewer.gui.models.timeline_model import anomaly_words

STATE_COLOURS = {"ok": "#2e7d32", "done": "#2e7d32", "running": "#1565c0", "watching": "#1565c0",
                 "incomplete": "#ef6c00",
                 "cancelled": "#757575", "-": "#757575"}
BAD_COLOUR = "#c62828"
WARN_COLOUR = "#a86400"  # the image passed, something inside did not (the verdict badge's "warn")
PATH_ROLE = Qt.ItemDataRole.UserRole
KIND_ROLE = Qt.ItemDataRole.UserRole + 1  # "run", "study", "child" or "broken"
PROBLEM_ROLE = Qt.ItemDataRole.UserRole + 2  # what cannot be read in the row's folder ("" when nothing)
IMAGE_ROLE = Qt.ItemDataRole.UserRole + 3  # a run row's final image (its thumbnail)
CHILD_ROLE = Qt.ItemDataRole.UserRole + 4  # a study child's StudyChild (filled again only when it changed)
SEARCH_ROLE = Qt.ItemDataRole.UserRole + 5  # the row's texts in lower case, as the filter searches them
UNREADABLE_COLOUR = "#8a8a8a"
COLUMNS = 6
THUMB_PX = 24
BUNDLE_COLOUR = "#6a1b9a"
WATCHED_COLOUR = "#00695c"  # a call made by the user's own program
WATCHING_TEXT = "● watching {name}"  # above the tree while the history watches a folder (the path in its tip)
REPLAY_TIMES = 5  # the menu's "Replay ×5"


def when_words(created: str) -> str:
    """'11-30 08:43' from an ISO time (in local time when it names its zone): the date and the time, always."""
    try:
        t = datetime.fromisoformat(created).astimezone()
        return f"{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}"  # strftime costs 4× this (10,000 rows)
    except ValueError:
        return f"{created[5:10]} {created[11:16]}".strip()


def time_words(created: str) -> str:
    """'08:43:07' (local time): a study child's, under its study's date."""
    try:
        return datetime.fromisoformat(created).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return created[11:19]


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
    stopWatchRequested = Signal()  # the watching line's Stop

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
        self._row_size: QSize | None = None
        self._thumbs: dict[str, QIcon] = {}  # final image path → its thumbnail (a final image never changes)
        self.replay_blocker: Callable[[str], str] | None = None  # why a run cannot be replayed now ("": it can)
        self.compare_from: str | None = None  # run A while the user picks run B
        self.shown: str | None = None  # the run the window shows (its row is the current one)
        self._made: dict[str, tuple[object, QTreeWidgetItem]] = {}  # row folder -> (row, its item), reused
        self._filtered = False  # some rows may be hidden by the filter
        self._needle = ""
        self._order: list[str] = []  # the folders of the rows in the tree, in order
        self._by_path: dict[str, QTreeWidgetItem] = {}  # every row's and study child's item, by folder
        self._expanded: set[str] = set()  # the studies the user opened (kept across refreshes)
        self._collapsed: set[str] = set()  # the studies the user closed (a watch study opens by itself)
        self.watching = QLabel(wordWrap=False)
        self.watching.setStyleSheet(f"color: {STATE_COLOURS['watching']};")
        self.watching.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # never widens
        self.stop_watching = QPushButton("Stop")
        self.stop_watching.setToolTip("Stop watching: back to the runs folder")
        self.stop_watching.clicked.connect(self.stopWatchRequested)
        watch_line = QHBoxLayout()
        watch_line.addWidget(self.watching, 1)
        watch_line.addWidget(self.stop_watching)
        self._made_live: str | None = None  # the live run the items were made for (its row says "running")
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        top = QHBoxLayout()
        top.addWidget(self.filter)
        top.addWidget(self.refresh_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(top)
        layout.addLayout(watch_line)
        layout.addWidget(self.tree)
        model.changed.connect(self._rebuild)
        model.watchingChanged.connect(self._show_watching)
        self.filter.textChanged.connect(self._apply_filter)
        self.refresh_button.clicked.connect(model.refresh)
        self.tree.currentItemChanged.connect(self._on_current)
        self.tree.itemClicked.connect(lambda item, _column: self._picked(item))
        self.tree.itemActivated.connect(lambda item, _column: self._say_problem(item))  # again, on Enter
        self.tree.customContextMenuRequested.connect(self._menu)
        self.tree.verticalScrollBar().valueChanged.connect(lambda _v: self._show_thumbnails())
        self.tree.itemExpanded.connect(self._on_expanded)
        self.tree.itemCollapsed.connect(self._on_collapsed)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self.tree, self.cancel_compare,
                  context=Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self._show_watching(model.watched)
        self._rebuild()

    def _show_watching(self, folder: object) -> None:
        self.watching.setText(WATCHING_TEXT.format(name=Path(str(folder)).name) if folder is not None else "")
        self.watching.setToolTip(f"Watching {folder}: read again every second, new runs appear as a program "
                                 "writes them" if folder is not None else "")
        self.watching.setVisible(folder is not None)
        self.stop_watching.setVisible(folder is not None)

    def _on_expanded(self, item: QTreeWidgetItem) -> None:
        path = str(item.data(0, PATH_ROLE))
        self._expanded.add(path)
        self._collapsed.discard(path)
        self._show_thumbnails()

    def _on_collapsed(self, item: QTreeWidgetItem) -> None:
        path = str(item.data(0, PATH_ROLE))
        self._expanded.discard(path)
        self._collapsed.add(path)

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
        """The tree from the model's rows. A row already in the tree keeps its item and its place: an unchanged
        row (rows are immutable: the same object is the same row) is left alone, a changed one (a study with a
        new run, a run that finished) is filled again in place, and only new rows get new items, inserted where
        they belong — so the chunks of a large folder's read cost what they add, a watched folder's refresh
        moves nothing on screen, and thumbnails are drawn for the rows on screen only (_show_thumbnails)."""
        current = self.tree.currentItem()
        keep = current.data(0, PATH_ROLE) if current is not None else None
        view = self._view_before(current)
        live = self.model.live_run
        rows = self.model.rows
        touched = live is not None or self._made_live is not None
        old = self._made
        reusable = {r.path for r in rows if r.path in old and type(old[r.path][0]) is type(r)}
        if [p for p in self._order if p in reusable] != [r.path for r in rows if r.path in reusable]:
            reusable = set()  # the order changed: every row again (rare: a refresh that re-sorts)
        self.tree.blockSignals(True)
        self.tree.setUpdatesEnabled(False)
        for index in reversed(range(len(self._order))):  # the rows gone or to be made again
            if self._order[index] not in reusable:
                self.tree.takeTopLevelItem(index)
        made: dict[str, tuple[object, QTreeWidgetItem]] = {}
        pending: list[QTreeWidgetItem] = []
        refilled = False
        for index, row in enumerate(rows):
            if row.path in reusable:
                if pending:
                    self.tree.insertTopLevelItems(index - len(pending), pending)
                    pending = []
                before, item = old[row.path]
                if before is not row or (touched and self._live_touches(row.path, live)):
                    self._fill(item, row)
                    refilled = True
                made[row.path] = (row, item)
                continue
            item = QTreeWidgetItem()
            self._fill(item, row)
            made[row.path] = (row, item)
            pending.append(item)
        if pending:
            self.tree.insertTopLevelItems(len(rows) - len(pending), pending)
        self._made, self._made_live, self._order = made, live, [r.path for r in rows]
        self._by_path = {r.path: made[r.path][1] for r in rows}
        for study in self.model.studies:
            item = made[study.path][1]
            for j in range(item.childCount()):
                child = item.child(j)
                self._by_path.setdefault(str(child.data(0, PATH_ROLE)), child)  # a run's own row first
        for study in self.model.studies:
            item = made[study.path][1]
            if item.childCount() and not item.isExpanded() and self._opens(study):
                item.setExpanded(True)
        now = self.tree.currentItem()
        if keep is not None and (now is None or now.data(0, PATH_ROLE) != keep):
            item = self._item_of(str(keep))
            if item is not None:
                self.tree.setCurrentItem(item)
        self.tree.blockSignals(False)
        self._apply_filter(self.filter.text(), force=bool(pending) or refilled or not reusable)
        if self.shown is not None:
            self.show_current(self.shown, scroll=False)
        self._restore_view(view)
        self.tree.setUpdatesEnabled(True)
        self._show_thumbnails()

    def _opens(self, study: StudyEntry) -> bool:
        """A study shown open: one the user opened, or a watch study still watching (its new calls in sight)
        that the user has not closed."""
        if study.path in self._collapsed:
            return False
        if study.path in self._expanded:
            return True
        if study.kind == "watch" and study.state(self.model.live_run) == "watching":
            self._expanded.add(study.path)
            return True
        return False

    def _view_before(self, current: QTreeWidgetItem | None) -> tuple[str | None, int, bool]:
        """(the folder of the row at the top of the view when scrolled down, its y, the current row on screen)."""
        tree = self.tree
        shown = current is not None and tree.visualItemRect(current).intersects(tree.viewport().rect())
        if tree.verticalScrollBar().value() == 0:
            return None, 0, shown  # at the top: new rows come in above, in sight
        top = tree.itemAt(2, 2)
        if top is None:
            return None, 0, shown
        return str(top.data(0, PATH_ROLE)), tree.visualItemRect(top).top(), shown

    def _restore_view(self, view: tuple[str | None, int, bool]) -> None:
        """The row that was at the top of the view back where it was; the current row, on screen before, on
        screen still."""
        anchor_path, anchor_y, current_shown = view
        tree = self.tree
        anchor = self._item_of(anchor_path)
        if anchor is not None and not anchor.isHidden():
            if tree.verticalScrollMode() == QAbstractItemView.ScrollMode.ScrollPerPixel:
                bar = tree.verticalScrollBar()
                bar.setValue(bar.value() + tree.visualItemRect(anchor).top() - anchor_y)
            else:
                tree.scrollToItem(anchor, QAbstractItemView.ScrollHint.PositionAtTop)
        current = tree.currentItem()
        if current_shown and current is not None:
            tree.scrollToItem(current)  # moves only when it would be out of sight

    def _live_touches(self, path: str, live: str | None) -> bool:
        """The row's words depend on the live run (its own, or one inside the study), now or before."""
        return any(run is not None and (run == path or run.startswith(path + os.sep))
                   for run in (live, self._made_live))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._show_thumbnails()

    def _fill(self, item: QTreeWidgetItem, row: object) -> None:
        if isinstance(row, StudyEntry):
            self._fill_study(item, row)
        elif isinstance(row, BrokenEntry):
            self._fill_broken(item, row)
        else:
            self._fill_run(item, row)  # type: ignore[arg-type]
        self._size(item)
        if not isinstance(row, RunEntry):
            _searchable(item)  # a run's row says it as it is filled

    def _size(self, item: QTreeWidgetItem) -> None:
        if self._row_size is None:  # one height for every row
            self._row_size = QSize(THUMB_PX, max(THUMB_PX + 2, self.tree.fontMetrics().height() + 6))
        item.setSizeHint(0, self._row_size)

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

    def _fill_run(self, item: QTreeWidgetItem, entry: RunEntry, when: str | None = None,
                  call: str | None = None) -> None:
        """`when`, `call`: a study's child (a watch study's kept call: its time, "call 7")."""
        state = entry.state(self.model.live_run)
        changes = f"[{' · '.join(entry.changes)}] " if entry.changes else ""
        tag = f"[bundle {entry.bundle}] " if entry.bundle else ""
        source = f"{call} · " if call else f"[{entry.source}] " if entry.source else ""
        anomaly = anomaly_words(entry.first_anomaly)
        warning = "⚠ " if entry.problem else ""
        texts = [when_words(entry.created) if when is None else when, warning + state, str(entry.seed),
                 str(entry.steps), source + tag + changes + entry.prompt, anomaly]
        for column, text in enumerate(texts):
            item.setText(column, text)
        item.setData(0, SEARCH_ROLE, " ".join(texts).lower())
        item.setData(0, PATH_ROLE, entry.path)
        item.setData(0, KIND_ROLE, "run" if when is None else "child")
        item.setData(0, PROBLEM_ROLE, entry.problem)
        if item.data(0, IMAGE_ROLE) != entry.image:
            item.setIcon(0, QIcon())  # drawn again once the row is on screen
        item.setData(0, IMAGE_ROLE, entry.image)  # its thumbnail drawn once the row is on screen
        item.setToolTip(0, entry.created)
        origin = f"\nfrom the bug report {entry.bundle} (a read-only copy in {Path(entry.path).parents[1]})" \
            if entry.bundle else ""
        where = f"\n{entry.source}: a call made by that program, recorded by its watcher" if entry.source else ""
        item.setToolTip(4, f"[{entry.source}] " * bool(entry.source) + changes + entry.prompt
                        + (origin if entry.bundle else "") + where)
        item.setToolTip(1, "\n".join(filter(None, (entry.problem, entry.error))) or entry.path)
        item.setToolTip(5, f"first anomaly: {anomaly}" if anomaly else "no anomaly")
        _colour(item, 1, state_colour(state))
        _colour(item, 4, WARN_COLOUR if entry.changes else BUNDLE_COLOUR if entry.bundle
                else WATCHED_COLOUR if entry.source else None)
        _colour(item, 5, BAD_COLOUR if anomaly else None)

    def _fill_broken(self, item: QTreeWidgetItem, entry: BrokenEntry) -> None:
        folder = Path(entry.path)
        short = entry.problem.replace(str(folder.resolve()), folder.name).replace(str(folder), folder.name)
        texts = [when_words(entry.created), entry.state(), "", "", messages.HISTORY_UNREADABLE.format(problem=short),
                 ""]
        for column, text in enumerate(texts):
            item.setText(column, text)
        item.setData(0, PATH_ROLE, entry.path)
        item.setData(0, KIND_ROLE, "broken")
        item.setData(0, PROBLEM_ROLE, entry.problem)
        for column in range(COLUMNS):
            item.setForeground(column, QBrush(QColor(UNREADABLE_COLOUR)))
            item.setToolTip(column, f"{entry.problem}\n{entry.path}")

    def _fill_study(self, item: QTreeWidgetItem, study: StudyEntry) -> None:
        state = study.state(self.model.live_run)
        watch = study.kind == "watch"
        kind = f"{study.kind} {study.source}" if study.source else study.kind
        if watch:  # the failures in sight in a narrow dock; what the study is doing said in words
            kind = f"{'watching' if state == 'watching' else 'watch'} {study.source}" + \
                (f" ({state})" if state not in ("watching", "done") else "")
        text = f"{kind}: {study.result}" if study.result else kind
        result = f"{study.failed}/{study.progress} failed" if watch and study.progress != "0" else state
        for column, value in enumerate([when_words(study.created), result, "", study.progress, text, ""]):
            item.setText(column, value)
        item.setData(0, PATH_ROLE, study.path)
        item.setData(0, KIND_ROLE, "study")
        item.setToolTip(0, study.created)
        item.setToolTip(1, "\n".join(filter(None, (f"{state}: {study.result}" if watch else "",
                                                    study.error, study.path))))
        if watch:
            item.setToolTip(3, f"{study.progress} calls watched")
            item.setToolTip(4, f"the calls of {study.source} (watch study {study.study_id}, {state}): "
                               f"{study.result}\nits children are the calls whose full record was kept")
        else:
            item.setToolTip(3, f"{study.progress} runs done")
            item.setToolTip(4, f"{study.kind} study {study.study_id}: {study.result}")
        _colour(item, 1, (BAD_COLOUR if study.failed else STATE_COLOURS["ok"]) if result != state
                else state_colour(state))
        _colour(item, 4, BAD_COLOUR if study.failed else STATE_COLOURS["watching"] if state == "watching" else None)
        font = item.font(4)
        font.setBold(True)
        item.setFont(4, font)
        self._sync_children(item, study)

    def _sync_children(self, item: QTreeWidgetItem, study: StudyEntry) -> None:
        """The study's children in the item, the ones shown before kept (filled again where they changed)."""
        want = {child.path: child for child in study.children}
        have = {str(item.child(j).data(0, PATH_ROLE)): item.child(j) for j in range(item.childCount())}
        if len(have) != item.childCount() or len(want) != len(study.children) or \
                [p for p in have if p in want] != [c.path for c in study.children if c.path in have]:
            item.takeChildren()
            have = {}
        if not have:
            fresh = [self._child_item(child) for child in study.children]
            item.addChildren(fresh)
            return
        for j in reversed(range(item.childCount())):
            if str(item.child(j).data(0, PATH_ROLE)) not in want:
                item.takeChild(j)
        for index, child in enumerate(study.children):
            existing = have.get(child.path)
            if existing is None:
                item.insertChild(index, self._child_item(child))
            elif existing.data(0, CHILD_ROLE) != child:
                self._fill_child(existing, child)
                _searchable(existing)

    def _child_item(self, child: StudyChild) -> QTreeWidgetItem:
        item = QTreeWidgetItem()
        self._fill_child(item, child)
        self._size(item)
        _searchable(item)
        return item

    def _fill_child(self, item: QTreeWidgetItem, child: StudyChild) -> None:
        item.setData(0, CHILD_ROLE, child)
        if child.run is not None:  # a watch study's kept call, read as a run
            self._fill_run(item, child.run, when=time_words(child.run.created), call=child.label)
            item.setData(0, PATH_ROLE, child.path)
            item.setToolTip(0, f"#{child.position} · {child.run.created}")
            return
        state = child.state()
        seed = "" if child.seed is None else str(child.seed)
        for column, text in enumerate([f"#{child.position}", state, seed, "", f"{child.role}: {child.label}", ""]):
            item.setText(column, text)
        item.setData(0, PATH_ROLE, child.path)
        item.setData(0, KIND_ROLE, "child")
        item.setToolTip(4, child.label)
        item.setToolTip(1, child.path)
        _colour(item, 1, state_colour(state))

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
            return not needle or needle in (item.data(0, SEARCH_ROLE) or _searchable(item))

        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            own = matches(item)
            shown_children = 0
            for j in range(item.childCount()):
                child = item.child(j)
                child.setHidden(not (own or matches(child)))
                shown_children += not child.isHidden()
            hide = not (own or shown_children)
            if item.isHidden() != hide:  # thousands of rows: only those that change are touched
                item.setHidden(hide)

    def select(self, path: str) -> None:
        """Make the row of this run, study or child run current (opening it)."""
        for item in self._items():
            if item.data(0, PATH_ROLE) == path:
                if item.parent() is not None:
                    item.parent().setExpanded(True)
                self.tree.setCurrentItem(item)
                return

    def show_current(self, path: str | None, scroll: bool = True) -> None:
        """The run shown in the window is the current row (scrolled to, its study opened), without opening it
        again: the highlight never stays on another run (after Replay ×5 the new rows come above it).
        `scroll` False: a refresh (the view stays where the user left it)."""
        self.shown = None if path is None else str(Path(path))
        item = self._item_of(self.shown)
        if item is None:
            return
        if item.parent() is not None:
            item.parent().setExpanded(True)
        self.tree.blockSignals(True)
        self.tree.setCurrentItem(item)
        self.tree.blockSignals(False)
        if scroll:
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


def _colour(item: QTreeWidgetItem, column: int, colour: str | None) -> None:
    """The column's text in that colour, or in the default one (None)."""
    brush = _BRUSHES.get(colour) if colour else None
    if colour and brush is None:
        brush = _BRUSHES[colour] = QBrush(QColor(colour))
    item.setData(column, Qt.ItemDataRole.ForegroundRole, brush)


_BRUSHES: dict[str, QBrush] = {}


def _searchable(item: QTreeWidgetItem) -> str:
    """The row's texts as the filter searches them, kept on the item (made when it is filled)."""
    text = " ".join(item.text(c) for c in range(COLUMNS)).lower()
    item.setData(0, SEARCH_ROLE, text)
    return text
