"""`a2rl fleet`: many runs (tasks x agents x driver models x repeats) on a Ray cluster, every
node writing to one store (PostgreSQL). See the README's fleet section."""

from .plan import AgentPlan, FleetPlan, load_plan, plan_from_flags, resume_key, run_label
from .runner import FleetResult, FleetRun, FleetRunner

__all__ = ["AgentPlan", "FleetPlan", "FleetResult", "FleetRun", "FleetRunner", "load_plan",
           "plan_from_flags", "resume_key", "run_label"]
