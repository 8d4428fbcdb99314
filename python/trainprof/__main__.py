# Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
"""``python -m trainprof``: ``run`` profiles a script (trainprof/_run.py);
every other command is the C++ CLI's (analyse, summary, ...)."""

from ._cli import main

main()
