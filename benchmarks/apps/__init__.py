"""FastStream applications started by the benchmarks with ``faststream run``."""
