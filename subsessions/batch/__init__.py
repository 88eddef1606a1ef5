"""Batches (DESIGN 3.11): one sub-session per item of a CSV or JSONL file, journaled."""
