"""Peer libraries, each run in a process of its own through its public API.

``python -m benchmarks.peers.<module> '<json args>'`` prints one JSON line:
``{"figures": [...], "errors": [...]}`` in the format of `benchmarks.common.Results`.
"""
