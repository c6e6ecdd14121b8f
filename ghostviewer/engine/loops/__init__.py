"""The loops that re-run: replay, bisection by blocks and by settings, patching, sweeps (+ Ray), baselines."""
