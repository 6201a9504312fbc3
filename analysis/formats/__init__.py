"""`a2rl export` beyond a2rl's own archive: a finished run in the formats other tools read.

    atif.py         Harbor's Agent Trajectory Interchange Format (ATIF), JSON
    inspect_log.py  an Inspect AI eval log (`inspect view` opens it), inspect_ai's own writer
    record.py       the run as both read it (report, conversation, token counts), read once
    usage.py        the token counts a transcript states

`a2rl.analysis.export` picks the writer (the archive's, `archive.py`, is the default) and
exports a fleet as one file per run plus an index.
"""

from .atif import to_atif, write_atif
from .inspect_log import InspectUnavailable, to_eval_log, write_inspect
from .record import NotFinishedError, RunRecord, read_record

__all__ = ["InspectUnavailable", "NotFinishedError", "RunRecord", "read_record", "to_atif",
           "to_eval_log", "write_atif", "write_inspect"]
