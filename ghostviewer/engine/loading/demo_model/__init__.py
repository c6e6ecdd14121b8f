"""The embedded demo pipeline: its architecture, tokenizer and location (trained by scripts/train_demo.py)."""
