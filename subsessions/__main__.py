"""The console entry (`subsessions`, `python -m subsessions`).

It imports nothing at its top: a Ctrl-C while the command's modules are still loading (they
take a second on a busy machine) ends the command as quietly as one later does, with 130.
"""

import sys


def main() -> int:
    try:
        from subsessions.cli import main as run

        return run()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
