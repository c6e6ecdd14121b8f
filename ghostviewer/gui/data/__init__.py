"""The numbers behind the views, read from the record off the GUI thread (numpy, no Qt widgets)."""
