"""benchmarks.server_profile reads perf's samples of the server and nothing else."""

from __future__ import annotations

import pytest

from benchmarks.server_profile import fold_perf_script, part_shares, self_shares

# `perf script -F comm,ip,sym`: a header line per sample, then its frames, leaf first
PERF_SCRIPT = """\
postgres 
\t          4c0ee0 _bt_compare
\t          596c89 _bt_doinsert
\t          222d68 btinsert
\t          26c449 ExecInsertIndexTuples
\t          3f930c [unknown]
\t          155976 main

postgres 
\t          24d1f3 XLogInsertRecord
\t          2792db XLogInsert
\t          47be10 heap_update
\t          155976 main

python3.11 
\t          111111 _PyEval_EvalFrameDefault
\t          222222 ExecInsertIndexTuples

postgres 
\t          3f930c 
\t          155976 main
"""


def test_only_the_servers_samples_are_folded_leaf_first() -> None:
    stacks = fold_perf_script(PERF_SCRIPT)
    assert stacks == [
        ["_bt_compare", "_bt_doinsert", "btinsert", "ExecInsertIndexTuples", "[unknown]",
         "main"],
        ["XLogInsertRecord", "XLogInsert", "heap_update", "main"],
        ["[unknown]", "main"],
    ]


def test_a_sample_counts_for_every_part_on_its_stack() -> None:
    stacks = fold_perf_script(PERF_SCRIPT)
    shares = dict(part_shares(stacks, [("index", "ExecInsertIndexTuples"),
                                       ("update", "heap_update"), ("wal", "XLogInsert"),
                                       ("lock", "heap_lock_tuple")]))
    assert shares == pytest.approx({"index": 1 / 3, "update": 1 / 3, "wal": 1 / 3, "lock": 0})
    assert self_shares(stacks)[0] == ("_bt_compare", pytest.approx(1 / 3))


def test_no_samples_give_no_shares_rather_than_an_error() -> None:
    assert dict(part_shares([], [("index", "ExecInsertIndexTuples")])) == {"index": 0}
    assert self_shares([]) == []
