"""Tests that drive the real engine process through the window: run one at a time, after the parallel pass."""
