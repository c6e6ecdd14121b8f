"""The judgement that needs no torch: verdicts, anomaly rules, run comparison, prompt lists and seed specs,
projections, stat grids. Numpy only, so the engine, the GUI, the CLI and a bundle opened on a machine without
torch all judge a run the same way."""
