"""Every test folder can import the shared support code as `support.<module>`.

pytest (prepend import mode) already puts tests/ on sys.path for this conftest; saying so
here keeps it true under another import mode too.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
