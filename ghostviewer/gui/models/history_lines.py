"""What one Runs history row shows, as plain data: a Line (its six texts, tooltips and colours, its folder, kind
and final image) made from a HistoryModel row by `line_of`, no Qt — the history's worker makes them off the GUI
thread, beside its read. Lines makes a row's line only when it is first drawn (or read); a Listing is where each
row is and the lower-case texts the filter searches, made once on the worker. history_rows.py serves them to the
view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from ghostviewer.gui import messages
from ghostviewer.gui.models.history_model import BrokenEntry, HistoryRow, RunEntry, StudyChild, StudyEntry
from ghostviewer.gui.models.timeline_model import anomaly_words

STATE_COLOURS = {"ok": "#2e7d32", "done": "#2e7d32", "running": "#1565c0", "watching": "#1565c0",
                 "incomplete": "#ef6c00",
                 "cancelled": "#757575", "-": "#757575"}
BAD_COLOUR = "#c62828"
WARN_COLOUR = "#a86400"  # the image passed, something inside did not (the verdict badge's "warn")
UNREADABLE_COLOUR = "#8a8a8a"
BUNDLE_COLOUR = "#6a1b9a"
WATCHED_COLOUR = "#00695c"  # a call made by the user's own program
HEADERS = ("When", "Result", "Seed", "Steps", "Prompt", "First anomaly")
COLUMNS = len(HEADERS)

NO_COLOURS: tuple[str | None, ...] = (None,) * COLUMNS
NO_TIPS: tuple[str, ...] = ("",) * COLUMNS


class Line(NamedTuple):
    path: str
    kind: str  # "run", "study", "child" or "broken"
    texts: tuple[str, ...]
    tips: tuple[str, ...] = NO_TIPS
    colours: tuple[str | None, ...] = NO_COLOURS
    problem: str = ""
    image: str | None = None
    children: tuple[Line, ...] = ()
    search: str = ""  # the texts in lower case, as the filter searches them

    @property
    def bold(self) -> bool:  # a study's prompt column
        return self.kind == "study"


_WHEN: dict[str, str] = {}  # a minute and its zone -> its words (runs made in the same minute share them)
_DIGITS = ".0123456789"


def when_words(created: str) -> str:
    """'11-30 08:43' from an ISO time (in local time when it names its zone): the date and the time, always."""
    key = created[:16] + created[19:].lstrip(_DIGITS)  # the minute and the zone: the seconds do not show
    words = _WHEN.get(key)
    if words is not None:
        return words
    try:
        t = datetime.fromisoformat(created).astimezone()  # ~15 µs (localtime): once a minute, not once a run
    except ValueError:
        return f"{created[5:10]} {created[11:16]}".strip()
    words = f"{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}"  # strftime costs 4× this (10,000 rows)
    if len(_WHEN) < 50_000:
        _WHEN[key] = words
    return words


def time_words(created: str) -> str:
    """'08:43:07' (local time): a study child's, under its study's date."""
    try:
        t = datetime.fromisoformat(created).astimezone()
        return f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    except ValueError:
        return created[11:19]


def state_colour(state: str) -> str:
    return WARN_COLOUR if state.startswith("ok · ") else STATE_COLOURS.get(state, BAD_COLOUR)


def live_sensitive(row: HistoryRow) -> bool:
    """The row's words depend on which run is live (it may be 'running' or 'incomplete')."""
    if isinstance(row, RunEntry):
        return row.status in ("running", "interrupted")
    return isinstance(row, StudyEntry) and row.status == "running" and row.kind != "watch"


def line_of(row: HistoryRow, live_run: str | None) -> Line:
    if isinstance(row, StudyEntry):
        return _study_line(row, live_run)
    if isinstance(row, BrokenEntry):
        return _broken_line(row)
    return _run_line(row, live_run)


def _searched(line: Line) -> Line:
    return line._replace(search=" ".join(line.texts).lower())


def _run_parts(entry: RunEntry, live_run: str | None, when: str | None = None,
               call: str | None = None) -> tuple[tuple[str, ...], str, str, str]:
    """(the row's texts, its state, its changes' words, its first anomaly's words)."""
    state = entry.state(live_run)
    changes = f"[{' · '.join(entry.changes)}] " if entry.changes else ""
    tag = f"[bundle {entry.bundle}] " if entry.bundle else ""
    source = f"{call} · " if call else f"[{entry.source}] " if entry.source else ""
    anomaly = anomaly_words(entry.first_anomaly) if entry.first_anomaly else ""
    warning = "⚠ " if entry.problem else ""
    texts = (when_words(entry.created) if when is None else when, warning + state, str(entry.seed),
             str(entry.steps), source + tag + changes + entry.prompt, anomaly)
    return texts, state, changes, anomaly


def _run_line(entry: RunEntry, live_run: str | None, when: str | None = None, call: str | None = None,
              path: str | None = None, tip0: str | None = None) -> Line:
    """`when`, `call`: a study's child (a watch study's kept call: its time, "call 7")."""
    texts, state, changes, anomaly = _run_parts(entry, live_run, when, call)
    origin = f"\nfrom the bug report {entry.bundle} (a read-only copy in {Path(entry.path).parents[1]})" \
        if entry.bundle else ""
    where = f"\n{entry.source}: a call made by that program, recorded by its watcher" if entry.source else ""
    why = "\n".join(filter(None, (entry.problem, entry.error))) or entry.path
    prompt = f"[{entry.source}] " * bool(entry.source) + changes + entry.prompt + origin + where
    tips = (entry.created if tip0 is None else tip0, why, "", "", prompt,
            f"first anomaly: {anomaly}" if anomaly else "no anomaly")
    colours = (None, state_colour(state), None, None,
               WARN_COLOUR if entry.changes else BUNDLE_COLOUR if entry.bundle else WATCHED_COLOUR if entry.source
               else None, BAD_COLOUR if anomaly else None)
    return Line(entry.path if path is None else path, "run" if when is None else "child", texts, tips, colours,
                entry.problem, entry.image, search=" ".join(texts).lower())


def search_of(row: HistoryRow, live_run: str | None) -> str:
    """What the filter searches in a row (its line's `search`), made without the rest of its line for a run:
    the filter's first pass over 10,000 runs whose lines were never made (~3 µs a run, not ~9)."""
    if isinstance(row, RunEntry):
        return " ".join(_run_parts(row, live_run)[0]).lower()
    return line_of(row, live_run).search


def _broken_line(entry: BrokenEntry) -> Line:
    folder = Path(entry.path)
    short = entry.problem.replace(str(folder.resolve()), folder.name).replace(str(folder), folder.name)
    texts = (when_words(entry.created), entry.state(), "", "", messages.HISTORY_UNREADABLE.format(problem=short), "")
    tip = f"{entry.problem}\n{entry.path}"
    return _searched(Line(entry.path, "broken", texts, (tip,) * COLUMNS, (UNREADABLE_COLOUR,) * COLUMNS,
                          entry.problem))


def _study_line(study: StudyEntry, live_run: str | None) -> Line:
    state = study.state(live_run)
    watch = study.kind == "watch"
    kind = f"{study.kind} {study.source}" if study.source else study.kind
    if watch:  # the failures in sight in a narrow dock; what the study is doing said in words
        kind = f"{'watching' if state == 'watching' else 'watch'} {study.source}" + \
            (f" ({state})" if state not in ("watching", "done") else "")
    text = f"{kind}: {study.result}" if study.result else kind
    result = f"{study.failed}/{study.progress} failed" if watch and study.progress != "0" else state
    texts = (when_words(study.created), result, "", study.progress, text, "")
    tip1 = "\n".join(filter(None, (f"{state}: {study.result}" if watch else "", study.error, study.path)))
    if watch:
        tip3 = f"{study.progress} calls watched"
        tip4 = (f"the calls of {study.source} (watch study {study.study_id}, {state}): {study.result}\n"
                "its children are the calls whose full record was kept")
    else:
        tip3, tip4 = f"{study.progress} runs done", f"{study.kind} study {study.study_id}: {study.result}"
    colours = (None, (BAD_COLOUR if study.failed else STATE_COLOURS["ok"]) if result != state else state_colour(state),
               None, None, BAD_COLOUR if study.failed else STATE_COLOURS["watching"] if state == "watching" else None,
               None)
    children = tuple(_child_line(child) for child in study.children)
    return _searched(Line(study.path, "study", texts, (study.created, tip1, "", tip3, tip4, ""), colours,
                          children=children))


def _child_line(child: StudyChild) -> Line:
    if child.run is not None:  # a watch study's kept call, read as a run
        return _run_line(child.run, None, when=time_words(child.run.created), call=child.label, path=child.path,
                         tip0=f"#{child.position} · {child.run.created}")
    state = child.state()
    seed = "" if child.seed is None else str(child.seed)
    texts = (f"#{child.position}", state, seed, "", f"{child.role}: {child.label}", "")
    return _searched(Line(child.path, "child", texts, ("", child.path, "", "", child.label, ""),
                          (None, state_colour(state), None, None, None, None)))


class Lines:
    """Every row's line, each made when it is first asked for — the rows the view draws, the ones the window or a
    test reads — and kept: a folder of 10,000 runs costs nothing per row to show (the view needs their count and
    whether a row has children, not their words). The filter's first pass makes only each row's search text
    (search_of). A line made before, for the same row (the same object) and, where its words depend on the live
    run, for the same live run, is taken from the Lines before (a refresh, a watched folder's new rows)."""

    def __init__(self, rows: list[HistoryRow], live_run: str | None = None, before: Lines | None = None,
                 listing: Listing | None = None) -> None:
        """`listing`: the worker's, for these rows (each row's search text, the studies' lines, when made)."""
        self.rows, self.live_run = rows, live_run
        self._lines: list[Line | None] = [None] * len(rows)
        self._search: list[str | None] | None = None  # made at the filter's first pass
        self.given: list[str] | None = None  # each row's search text, made on the worker (no live run)
        self._sensitive: list[int] = []  # the places of the rows whose words depend on the live run
        self.made: dict[str, tuple[HistoryRow, Line]] = {}  # row folder -> (row, its line): the lines made
        self._before: dict[str, tuple[HistoryRow, Line]] = {}
        if before is not None:
            self._before = dict(before._before)
            self._before.update(before.made)
            if before.live_run != live_run:
                self._before = {p: m for p, m in self._before.items() if not live_sensitive(m[0])}
        self.formatted = 0  # lines formatted here (not taken from before): what a test counts
        if listing is not None:
            self.take(listing)

    def take(self, listing: Listing) -> None:
        """The worker's search texts and studies' lines for these rows (made with no live run)."""
        if listing.rows is not self.rows or listing.search is None:
            return
        self.given, self._sensitive = listing.search, listing.sensitive or []
        for path, (row, line) in (listing.studies or {}).items():
            if not (self.live_run and live_sensitive(row)):
                self._before.setdefault(path, (row, line))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, place: int) -> Line:
        line = self._lines[place]
        if line is None:
            if place < 0:
                place += len(self.rows)
            row = self.rows[place]
            before = self._before.get(row.path)
            if before is not None and before[0] is row:
                line = before[1]
            else:
                line = line_of(row, self.live_run)
                self.formatted += 1
            self._lines[place] = line
            self.made[row.path] = (row, line)
        return line

    def __iter__(self) -> Iterator[Line]:
        return (self[place] for place in range(len(self.rows)))

    def path(self, place: int) -> str:
        return self.rows[place].path

    def child_count(self, place: int) -> int:
        row = self.rows[place]
        return len(row.children) if isinstance(row, StudyEntry) else 0

    def child_path(self, place: int, child: int) -> str:
        return self.rows[place].children[child].path  # type: ignore[union-attr] - a study's

    def all_search(self) -> list[str]:
        """Every row's search text, in order (the worker's, where it made them: nothing made here)."""
        given = self.given
        if given is None:
            return [self.search(place) for place in range(len(self.rows))]
        if not self.live_run or not self._sensitive:
            return given
        out = list(given)
        for place in self._sensitive:
            out[place] = self.search(place)
        return out

    def search(self, place: int) -> str:
        """The row's texts in lower case, as the filter searches them."""
        line = self._lines[place]
        if line is not None:
            return line.search
        if self._search is None:
            self._search = [None] * len(self.rows)
        text = self._search[place]
        if text is None:
            row, given = self.rows[place], self.given
            text = self._search[place] = given[place] if given is not None and not (
                self.live_run and live_sensitive(row)) else search_of(row, self.live_run)
        return text


class Listing(NamedTuple):
    """Where each of `rows` is, made beside a read on the history's worker: thousands of rows then cost the GUI
    thread nothing per row to show; and, made on the worker next, what the filter searches in each."""

    rows: list[HistoryRow]  # the rows (the same objects, in the same order)
    top: dict[str, int]  # as HistoryRows._top
    child: dict[str, tuple[int, int]]  # as HistoryRows._child
    search: list[str] | None = None  # search_of(row, None) of each row
    studies: dict[str, tuple[HistoryRow, Line]] | None = None  # the studies' lines (their children searched too)
    sensitive: list[int] | None = None  # the places of the rows whose words depend on the live run


def searches(rows: list[HistoryRow], check: Callable[[], None] | None = None,
             before: tuple[list[HistoryRow], list[str]] | None = None
             ) -> tuple[list[str], dict[str, tuple[HistoryRow, Line]], list[int]]:
    """(search_of(row, None) of every row, the studies' whole lines, the places of the rows whose words depend on
    the live run) — on the history's worker, once a large folder's rows are shown: the filter's first pass then
    formats nothing on the GUI thread (a sweep of 10,000 runs: its children's texts). `before`: rows and their
    texts made before, kept for the same row objects."""
    known = {row.path: (row, text) for row, text in zip(*before, strict=True)} if before is not None else {}
    out, studies, sensitive = [], {}, []
    for place, row in enumerate(rows):
        if check is not None and place % 500 == 0:
            check()
        if live_sensitive(row):
            sensitive.append(place)
        kept = known.get(row.path)
        if kept is not None and kept[0] is row and type(row) is not StudyEntry:
            out.append(kept[1])
        elif type(row) is StudyEntry:
            line = line_of(row, None)
            studies[row.path] = (row, line)
            out.append(line.search)
        else:
            out.append(search_of(row, None))
    return out, studies, sensitive


def listing(rows: list[HistoryRow]) -> Listing:
    return Listing(rows, *index_rows(rows))


def index_rows(rows: list[HistoryRow]) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """(a row's folder -> its place, a study child's folder -> (its study's place, its place))."""
    top: dict[str, int] = {}
    child: dict[str, tuple[int, int]] = {}
    for place, row in enumerate(rows):
        top.setdefault(row.path, place)
        if type(row) is StudyEntry:
            for j, kid in enumerate(row.children):
                child.setdefault(kid.path, (place, j))
    return top, child
