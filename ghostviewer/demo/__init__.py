"""The embedded demo world: procedurally drawn, captioned shapes, and the checks that the demo model draws them.

Torch-free, so the record, the GUI and the tests can use it too.
"""
