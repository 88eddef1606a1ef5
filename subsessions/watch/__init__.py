"""`subsessions watch`: a live tree of a home's sessions, built from their rollouts as they grow.

The model (stats, follower, forest, cells) is plain Python and serves `--once`; only `app`
and `table` import Textual (the optional `[watch]` extra), and only when the live view opens.
"""
