"""A state change asked of a row in a state it cannot leave that way."""

from __future__ import annotations


class WrongState(RuntimeError):
    """A transition refused: the row is not in a state it may be made from. Raised before
    anything is written (its transaction rolls back); the message names the row and both
    states. Seen only by a bug: callers move their rows in the order the owner allows."""

    def __init__(self, table: str, key: object, state: str, wanted: str) -> None:
        super().__init__(f"{table} {key}: cannot become {wanted} from {state}")
        self.table, self.key, self.state, self.wanted = table, key, state, wanted
