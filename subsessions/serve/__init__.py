"""`subsessions serve`: the GitHub Copilot CLI runtime protocol over our engine."""

import logging

# `--log-level`'s words (the SDKs pass them), here so the parser names them without the engine
LOG_LEVELS = {"none": logging.CRITICAL + 1, "error": logging.ERROR, "warning": logging.WARNING,
              "info": logging.INFO, "debug": logging.DEBUG, "all": logging.DEBUG}
