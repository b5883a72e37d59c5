"""Benchmarks for faststream-sqla, against baselines and peer libraries measured in the same run.

Run everything with ``python -m benchmarks.run`` (``--help`` for the options). Nothing here
is part of the package; the dependencies live in the ``bench`` extra.
"""
