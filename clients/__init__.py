"""Agents that drive a run: the scripted reference agent (connectors for agent CLIs later)."""

from .reference import AgentError, ReferenceAgent

__all__ = ["AgentError", "ReferenceAgent"]
