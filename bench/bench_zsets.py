#!/usr/bin/env python3
"""Cost per call of sorted-set commands as a zset grows: the zset rows of bench_collections.py.

    .venv/bin/python bench/bench_zsets.py                 # all sizes
    .venv/bin/python bench/bench_zsets.py --sizes 1000,100000 --calls 20000

= ``bench/bench_collections.py --groups zset`` (see its docstring for what each row times).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_collections import main  # noqa: E402

if __name__ == "__main__":
    main(default_groups="zset", doc=__doc__)
