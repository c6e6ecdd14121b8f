"""Which thread decodes each thumbnail: the history's and the gallery's images must be decoded off the GUI thread."""

from __future__ import annotations

import threading

from PySide6.QtGui import QImage

from ghostviewer.gui.models import gallery_images


def spy_decodes(monkeypatch) -> list[bool]:  # noqa: ANN001 - pytest's fixture
    """A list that gets, for every image decoded from now on, whether it was decoded on the main (GUI) thread."""
    on_main: list[bool] = []
    real_decode = gallery_images.decode

    def spied_decode(path: str, size: int = gallery_images.IMAGE_PX) -> QImage:
        on_main.append(threading.current_thread() is threading.main_thread())
        return real_decode(path, size)

    monkeypatch.setattr(gallery_images, "decode", spied_decode)
    return on_main
