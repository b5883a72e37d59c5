"""Chaos runs against real worker processes and real databases (issue 20).

Each module is a scenario with a short form the test suite runs and a long form for
the command line (`python -m chaos.<scenario> --help`), which prints a table.
"""
