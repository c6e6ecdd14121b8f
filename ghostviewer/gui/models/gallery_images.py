"""The sweep gallery's final images: decoded off the GUI thread, for the cells drawn only, scaled to the largest
cell and kept in a bounded cache (the least recently drawn go first), so that a sweep of 10,000 runs scrolls
without waiting on its PNGs and its memory stays flat (the history's thumbnails come the same way).

`get(path)` answers at once: the image when it is cached, else None (the cell draws its placeholder) and the image
is wanted: the newest wishes are decoded first, a batch at a time, on the worker; `decoded` names the images that
came in, for the model to redraw their cells. `synchronous` (tests): decoded before get() returns.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QImage

from ghostviewer.gui.link.worker import Task, Worker

IMAGE_PX = 96  # the grid's largest cell (GRID_CELL[1]); the list's thumbnails are 80 px
CACHE_IMAGES = 1024  # ~36 KiB each at 96 px: ~37 MiB at most, whatever the sweep's size
BATCH = 48  # images decoded per worker call (a screenful of the grid is ~40 cells)
WANTED_MAX = 512  # wishes kept (older ones, scrolled past long ago, are dropped; asked again when drawn)


def decode(path: str, size: int = IMAGE_PX) -> QImage:
    """The image at `path` scaled to fit `size` px (a null image when it cannot be read). Safe off the GUI thread
    (a QImage, not a QPixmap)."""
    image = QImage(path)
    if image.isNull() or (image.width() <= size and image.height() <= size):
        return image
    return image.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)


class GalleryImages(QObject):
    decoded = Signal(list)  # the paths whose images just came in

    def __init__(self, capacity: int = CACHE_IMAGES, synchronous: bool = False, parent: QObject | None = None,
                 size: int = IMAGE_PX) -> None:
        """`size`: the largest side the images are scaled to (the history's thumbnails: 24 px)."""
        super().__init__(parent)
        self.capacity, self.size = capacity, size
        self.decodes = 0  # images decoded so far (tests and benchmarks count them)
        self._cache: OrderedDict[str, QImage] = OrderedDict()
        self._wanted: OrderedDict[str, None] = OrderedDict()  # newest last
        self._busy = False
        self._worker = Worker(1, synchronous=synchronous, what="reading the sweep's images", parent=self)
        self._worker.answered.connect(self._on_decoded)
        self._kick = QTimer(self, singleShot=True, interval=0)  # one batch per turn of the event loop
        self._kick.timeout.connect(self._next_batch)
        self._synchronous = synchronous

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, path: str) -> QImage | None:
        image = self._cache.get(path)
        if image is not None:
            self._cache.move_to_end(path)
            return image
        self._wanted[path] = None
        self._wanted.move_to_end(path)
        while len(self._wanted) > WANTED_MAX:
            self._wanted.popitem(last=False)
        if self._synchronous:
            self._next_batch()
            return self._cache.get(path)
        if not self._busy:
            self._kick.start()
        return None

    def clear(self) -> None:
        self._cache.clear()
        self._wanted.clear()

    def _next_batch(self) -> None:
        if self._busy or not self._wanted:
            return
        batch = []
        while self._wanted and len(batch) < BATCH:
            batch.append(self._wanted.popitem(last=True)[0])  # the newest wishes: the cells on screen now
        self._busy = True

        size = self.size

        def work(task: Task) -> list[tuple[str, QImage]]:
            out = []
            for path in batch:
                task.check()
                out.append((path, decode(path, size)))
                time.sleep(0)  # hand the GIL to the GUI thread if it waits (else it may wait 5 ms a turn)
            return out

        self._worker.submit("images", work)

    def _on_decoded(self, _tag: object, result: object) -> None:
        self._busy = False
        if isinstance(result, list):
            for path, image in result:
                self._cache[path] = image
                self._cache.move_to_end(path)
                self.decodes += 1
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
            self.decoded.emit([path for path, _ in result])
        if self._wanted:
            if self._synchronous:
                self._next_batch()
            else:
                self._kick.start()

    def shutdown(self) -> None:
        self._worker.shutdown()
