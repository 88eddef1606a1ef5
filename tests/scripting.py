"""The shipped scripted-model helpers (`subsessions.testing`) and the fixtures tests take.

Imported as a plain module by the tests (tests/ is on sys.path, as for fake_openai).
"""

from __future__ import annotations

import pytest

from subsessions.testing import *  # noqa: F403  (the helpers, as the tests name them)
from subsessions.testing import Script, Watch


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def watch() -> Watch:
    return Watch()
