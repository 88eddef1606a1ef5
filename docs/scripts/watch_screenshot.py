"""Make docs/images/watch.svg: `subsessions watch` over the demo's home, as Textual draws it.

Run from the repository's root, with the [watch] extra installed:

    python docs/scripts/watch_screenshot.py

It runs `subsessions demo` into a temporary home, opens the live view under Textual's own
pilot (the one the tests use), waits until every session's row is drawn, and saves the
screen with `App.save_screenshot`.
"""

from __future__ import annotations

import asyncio
import io
import sys
import tempfile
from pathlib import Path

from subsessions.cli.demo import run_demo
from subsessions.watch.app import WatchApp
from subsessions.watch.follower import Follower

OUT = Path(__file__).resolve().parents[1] / "images" / "watch.svg"
SIZE = (150, 16)


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="subsessions-shot-") as scratch:
        home = Path(scratch) / "home"
        await run_demo(home, io.StringIO())
        follower = Follower(str(home))
        follower.open()
        app = WatchApp(follower, interval=0.05)
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(200):  # until the nine sessions of the demo are drawn
                await pilot.pause(0.05)
                if "linter_fixer" in app.export_screenshot() and len(follower.sessions) >= 9:
                    break
            await pilot.press("down")
            await pilot.pause(0.2)
            app.save_screenshot(filename=OUT.name, path=str(OUT.parent))
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
