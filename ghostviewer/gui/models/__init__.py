"""State of the window, in small QObject models that widgets bind to (STYLE 2)."""
