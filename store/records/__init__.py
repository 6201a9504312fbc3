"""The store's writers: each table's rows are made and changed by one module, here.

Why: a row's state (a run's clock and end, a job's end, a submission's status, a queue row's
lease) used to be written wherever it was needed: a submission's status by the submit tool and
by the grading queue, a job's row by the command tool, its settlement and the watcher thread.
A rule about a state (which transition is allowed, which lock is held, which fields change
together) then had to be kept in several places at once. Now each table has one owning
module whose functions are its state changes (reserve, start, settle, grade, fail, close,
refuse ...), each one short transaction with the locks it needs; the server, the tools, the
grading queue and the clients call them. `tests/test_one_writer.py` fails when code outside
the owner constructs a row of a table, sets one of its columns or writes it in SQL.

Reads are not owned: anyone may select. A function taking a `Session` writes inside its
caller's transaction, so that the rows of several tables that change together (an evaluation,
its queue row and its submission) still change in one.
"""

from __future__ import annotations

#: table -> the module that writes it (the only one). Tables whose single writer was already
#: a store module keep it (`store/db.py` for blobs and the schema's own facts,
#: `store/ledger.py` for the cost ledger).
WRITERS: dict[str, str] = {
    "run": "a2rl.store.records.runs",
    "budgetevent": "a2rl.store.records.budget",
    "toolcall": "a2rl.store.records.toolcalls",
    "job": "a2rl.store.records.jobs",
    "jobfile": "a2rl.store.records.jobfiles",
    "revision": "a2rl.store.records.revisions",
    "snapshot": "a2rl.store.records.revisions",
    "snapshotfile": "a2rl.store.records.revisions",
    "submission": "a2rl.store.records.submissions",
    "graderequest": "a2rl.store.records.grade_requests",
    "evaluation": "a2rl.store.records.evaluations",
    "regrade": "a2rl.store.records.evaluations",
    "baselinecache": "a2rl.store.records.evaluations",
    "audit": "a2rl.store.records.audits",
    "ledger": "a2rl.store.ledger",
    "blob": "a2rl.store.db",
    "meta": "a2rl.store.db",
}

#: Modules that write every table, and why: none of them changes a row's state.
WHOLE_RUN_COPIES: dict[str, str] = {
    "a2rl.store.transfer": "`a2rl import`: a finished run's rows copied as they were in the "
                          "archive (ids renumbered), not state changes",
}
