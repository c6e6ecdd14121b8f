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

A model/view (gui/models/history_rows.py, its lines history_lines.py): one Line per row, made when the row is first
drawn (or read), served to a QTreeView that asks only for the rows on screen (thumbnails are read then); a refresh
resets the model and puts back the current row, the selection, the studies opened and the scroll position. `tree`
also answers the QTreeWidget calls the window and the tests make (topLevelItem, currentItem, setCurrentItem,
selectedItems...) with HistoryItem handles.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, QModelIndex, QPoint, QSize, Qt, Signal
from PySide6.QtGui import QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from ghostviewer.gui import messages
from ghostviewer.gui.models.history_lines import (  # noqa: F401 - the names other modules import from here
    BAD_COLOUR,
    BUNDLE_COLOUR,
    COLUMNS,
    STATE_COLOURS,
    UNREADABLE_COLOUR,
    WARN_COLOUR,
    WATCHED_COLOUR,
    Line,
    Lines,
    line_of,
    live_sensitive,
    state_colour,
    time_words,
    when_words,
)
from ghostviewer.gui.models.history_model import HistoryModel, StudyEntry
from ghostviewer.gui.models.history_rows import (  # noqa: F401 - the names other modules import from here
    IMAGE_ROLE,
    KIND_ROLE,
    PATH_ROLE,
    PROBLEM_ROLE,
    SEARCH_ROLE,
    THUMB_PX,
    HistoryRows,
)
from ghostviewer.gui.widgets.history_tree import HistoryItem, HistoryTree, Key

WATCHING_TEXT = "● watching {name}"  # above the tree while the history watches a folder (the path in its tip)
REPLAY_TIMES = 5  # the menu's "Replay ×5"
View = tuple[Key | None, int, bool]  # (the row at the top of the view when scrolled down, its y, current on screen)


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
        self.rows = HistoryRows(self)
        self.tree = HistoryTree(self.rows)
        self.tree.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.tree.setIconSize(QSize(THUMB_PX, THUMB_PX))
        for column, width in enumerate((134, 84, 44, 40, 220)):  # When: the thumbnail, the date and time
            self.tree.setColumnWidth(column, width)
        self.rows.row_size = QSize(THUMB_PX, max(THUMB_PX + 2, self.tree.fontMetrics().height() + 6))
        self.replay_blocker: Callable[[str], str] | None = None  # why a run cannot be replayed now ("": it can)
        self.compare_from: str | None = None  # run A while the user picks run B
        self.shown: str | None = None  # the run the window shows (its row is the current one)
        self._quiet = False  # the current row is being put back (not picked by the user)
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
        model.searchable.connect(self._take_search)
        model.watchingChanged.connect(self._show_watching)
        self.filter.textChanged.connect(self._apply_filter)
        self.refresh_button.clicked.connect(model.refresh)
        self.tree.selectionModel().currentChanged.connect(self._on_current)
        self.tree.clicked.connect(self._on_clicked)
        self.tree.activated.connect(self._on_activated)  # again, on Enter
        self.tree.customContextMenuRequested.connect(self._menu)
        self.tree.expanded.connect(self._on_expanded)
        self.tree.collapsed.connect(self._on_collapsed)
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

    def _on_expanded(self, index: QModelIndex) -> None:
        line = self.rows.line(index)
        if line is not None and not self._quiet:
            self._expanded.add(line.path)
            self._collapsed.discard(line.path)

    def _on_collapsed(self, index: QModelIndex) -> None:
        line = self.rows.line(index)
        if line is not None and not self._quiet:
            self._expanded.discard(line.path)
            self._collapsed.add(line.path)

    # -- building ---------------------------------------------------------------------------------------
    def _items(self) -> list[HistoryItem]:
        """Every row, top level and children (hidden ones too), in display order."""
        items: list[HistoryItem] = []
        lines = self.rows.lines
        for place in range(len(lines)):
            path = lines.path(place)
            items.append(self.tree.item((path, None)))
            items.extend(self.tree.item((path, lines.child_path(place, j))) for j in range(lines.child_count(place)))
        return items

    def _rebuild(self) -> None:
        """The tree from the model's rows (their lines made when drawn: history_lines.Lines); the current row, the
        selection, the studies opened and the scroll position as they were (a watched folder's refresh moves
        nothing on screen)."""
        state = self._state_before()
        rows, listing = self.model.rows, self.model.listing
        mine = listing is not None and listing.rows is rows
        lines = Lines(rows, self.model.live_run, self.rows.lines, listing if mine else None)
        self._quiet = True
        try:  # the worker's index of these rows, when it made one (a large folder's read)
            self.rows.set_lines(lines, (listing.top, listing.child) if mine else None)
            self.tree.forget_handles()
            self._put_back(state)
        finally:
            self._quiet = False
        if self.shown is not None:
            self.show_current(self.shown, scroll=False)
        self._restore_view(state[2])

    def _take_search(self) -> None:
        listing = self.model.listing
        if listing is not None:
            self.rows.lines.take(listing)

    def _state_before(self) -> tuple[Key | None, list[Key], View]:
        current = self.tree.key_of(self.tree.currentIndex())
        selected = [k for k in (self.tree.key_of(i) for i in self.tree.selectionModel().selectedRows()) if k]
        return current, selected, self._view_before()

    def _put_back(self, state: tuple[Key | None, list[Key], View]) -> None:
        """The studies opened, the selection and the current row back after a reset of the rows."""
        current, selected, _view = state
        for study in self.model.studies:
            if study.children and self._opens(study):
                index = self.rows.index_of(study.path)
                if index.isValid():
                    self.tree.setExpanded(index, True)
        if selected:
            self.tree.select_keys(selected)
        if current is not None:
            index = self.tree.item(current).index()
            if index.isValid():
                self.tree.selectionModel().setCurrentIndex(index, QItemSelectionModel.SelectionFlag.NoUpdate)

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

    def _view_before(self) -> View:
        tree = self.tree
        current = tree.currentIndex()
        shown = current.isValid() and tree.visualRect(current).intersects(tree.viewport().rect())
        if tree.verticalScrollBar().value() == 0:
            return None, 0, shown  # at the top: new rows come in above, in sight
        top = tree.indexAt(QPoint(2, 2))
        key = tree.key_of(top)
        if key is None:
            return None, 0, shown
        return key, tree.visualRect(top).top(), shown

    def _restore_view(self, view: View) -> None:
        """The row that was at the top of the view back where it was; the current row, on screen before, on
        screen still."""
        anchor_key, anchor_y, current_shown = view
        tree = self.tree
        anchor = tree.item(anchor_key).index() if anchor_key is not None else QModelIndex()
        if anchor.isValid():
            if tree.verticalScrollMode() == QAbstractItemView.ScrollMode.ScrollPerPixel:
                bar = tree.verticalScrollBar()
                bar.setValue(bar.value() + tree.visualRect(anchor).top() - anchor_y)
            else:
                tree.scrollTo(anchor, QAbstractItemView.ScrollHint.PositionAtTop)
        current = tree.currentIndex()
        if current_shown and current.isValid():
            tree.scrollTo(current)  # moves only when it would be out of sight

    def thumbnail(self, path: str | None) -> QIcon | None:
        return self.rows.thumbnail(path)

    def row_count(self) -> int:
        """Top-level rows in the tree (runs, studies, unreadable folders)."""
        return len(self.rows.lines)

    def shown_count(self) -> int:
        """Top-level rows the filter leaves shown."""
        return self.rows.rowCount()

    # -- filtering and selection ------------------------------------------------------------------------
    def _apply_filter(self, text: str) -> None:
        needle = text.strip().lower()
        if needle == self.rows.needle:
            return
        state = self._state_before()
        self._quiet = True
        try:
            self.rows.set_needle(needle)
            self._put_back(state)
        finally:
            self._quiet = False
        current = self.tree.currentIndex()
        if current.isValid():
            self.tree.scrollTo(current)

    def select(self, path: str) -> None:
        """Make the row of this run, study or child run current (opening it)."""
        index = self.rows.index_of(path)
        if not index.isValid():  # hidden by the filter: opened all the same
            where = self.rows.place(path)
            if where is not None:
                self._open(self.rows.lines[where[0]] if where[1] < 0 else self.rows.lines[where[0]].children[where[1]])
            return
        if index.parent().isValid():
            self.tree.setExpanded(index.parent(), True)
        self.tree.setCurrentIndex(index)

    def show_current(self, path: str | None, scroll: bool = True) -> None:
        """The run shown in the window is the current row (scrolled to, its study opened), without opening it
        again: the highlight never stays on another run (after Replay ×5 the new rows come above it).
        `scroll` False: a refresh (the view stays where the user left it)."""
        self.shown = None if path is None else str(Path(path))
        index = self._index_of(self.shown)
        if not index.isValid():
            return
        if index.parent().isValid():
            self.tree.setExpanded(index.parent(), True)
        self._quiet = True
        try:
            if self.tree.currentIndex() != index:
                self.tree.setCurrentIndex(index)
        finally:
            self._quiet = False
        if scroll:
            self.tree.scrollTo(index)

    def _item_of(self, path: str | None) -> HistoryItem | None:
        """The row of this folder (a top-level row before a study's run of the same folder), or None."""
        if path is None:
            return None
        where = self.rows.place(path) or self.rows.place(str(Path(path)))
        if where is None:
            return None
        lines = self.rows.lines
        return self.tree.item((lines.path(where[0]), None if where[1] < 0 else lines.child_path(*where)))

    def _index_of(self, path: str | None) -> QModelIndex:
        if path is None:
            return QModelIndex()
        index = self.rows.index_of(path)
        return index if index.isValid() else self.rows.index_of(str(Path(path)))

    def _on_current(self, index: QModelIndex, _previous: QModelIndex) -> None:
        if self._quiet:
            return
        line = self.rows.line(index)
        if line is None or self._picked(line):
            return
        if line.kind == "study":
            self.tree.setExpanded(index.siblingAtColumn(0), True)  # a study is opened by looking at its runs
        self._open(line)

    def _open(self, line: Line) -> None:
        if line.kind == "study":
            self.studySelected.emit(line.path)
        elif line.kind != "broken":  # nothing of an unreadable folder can be shown: only its problem is said
            self.runSelected.emit(line.path)
        self._say(line)

    def _on_clicked(self, index: QModelIndex) -> None:
        line = self.rows.line(index)
        if line is not None:
            self._picked(line)

    def _on_activated(self, index: QModelIndex) -> None:
        line = self.rows.line(index)
        if line is not None:
            self._say(line)

    def _say(self, line: Line) -> None:
        if line.problem:
            self.messageRequested.emit(messages.HISTORY_PROBLEM.format(name=Path(line.path).name,
                                                                       problem=line.problem))

    def _say_problem(self, item: HistoryItem) -> None:
        line = item.line()
        if line is not None:
            self._say(line)

    # -- Compare with…: the next run clicked is B -------------------------------------------------------
    def begin_compare(self, path: str) -> None:
        self.compare_from = path
        self.messageRequested.emit(messages.COMPARE_PICK_B.format(run_id=Path(path).name))

    def cancel_compare(self) -> None:
        if self.compare_from is not None:
            self.compare_from = None
            self.messageRequested.emit(messages.COMPARE_PICK_CANCELLED)

    def _picked(self, line: Line) -> bool:
        """While picking run B: a run (or a study's run) other than A is B (True: the click is used up)."""
        if self.compare_from is None or line.kind in ("study", "broken"):
            return False
        if Path(line.path) == Path(self.compare_from):
            return True  # A itself: keep waiting for B
        run_a, self.compare_from = self.compare_from, None
        self.compareRequested.emit(run_a, line.path)
        return True

    # -- the context menu -------------------------------------------------------------------------------
    def context_menu(self, item: HistoryItem) -> QMenu:
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

    def _menu(self, position: QPoint) -> None:
        item = self.tree.itemAt(position)
        if item is not None:
            menu = self.context_menu(item)
            menu.exec(self.tree.viewport().mapToGlobal(position))
            menu.deleteLater()
