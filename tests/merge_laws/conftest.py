"""Hypothesis profiles for the merge-law suite.

- ``ci`` (default): derandomized, modest example counts; the whole suite runs in well
  under a minute on two cores.
- ``deep``: many more random examples, for hunting law violations
  (``HYPOTHESIS_PROFILE=deep python -m pytest tests/merge_laws``).
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))  # laws_gen, whatever the import mode

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("ci", derandomize=True, max_examples=100, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.register_profile("deep", max_examples=2000, deadline=None,
                          suppress_health_check=_SLOW_OK, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
