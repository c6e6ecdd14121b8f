"""The embedded demo world: procedurally drawn, captioned shapes, and how to read its pictures (colour_check,
shape_check).

Numpy and PIL only, and no other part of GhostViewer: analysis reads the demo's pictures with it (the demo's
prompt check, analysis/prompt_check.py), the engine draws its baseline prompts from it. The evaluation of the demo
model, which runs it and asks analysis' verdict too, is engine/loading/demo_model/evaluate.py.
"""
