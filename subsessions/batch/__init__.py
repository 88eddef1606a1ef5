"""Batches: one sub-session per item of a CSV or JSONL file, journaled."""
