"""`subsessions serve`: the GitHub Copilot CLI runtime protocol over our engine (DESIGN 3.10)."""
