"""Fuzzing: every case in a forked child under a time and memory limit (harness.py).

CI runs a few hundred cases of each kind; ``--run-slow`` runs the full counts (tens of
thousands). ``CERA_FUZZ_WORKERS`` sets how many worker processes run cases (default 1 per
pytest process), ``CERA_FUZZ_START`` moves the window of case numbers (to explore new
cases; a case number reproduces its input exactly), ``CERA_FUZZ_FINDINGS`` is where
inputs that failed are kept, and ``CERA_FUZZ_PROGRESS=N`` prints the tally every N cases.
"""

from __future__ import annotations

import pytest
from harness import Pool, pool_size


@pytest.fixture(scope="module")
def pool():
    with Pool(pool_size()) as p:
        yield p


