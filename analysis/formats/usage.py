"""The driver model's token counts (and cost, where the agent reports it) in a transcript.

Each agent reports them its own way, so each connector reads its own
(`Connector.transcript_usage`, next to its transcript parser in clients/); this asks the
agent whose parser recognized the transcript. Pure: bytes and that agent's name in, totals out.
"""

from __future__ import annotations

from a2rl.clients.registry import transcript_usage
from a2rl.clients.transcript import Usage

__all__ = ["Usage", "transcript_usage"]
