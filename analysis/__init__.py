"""Post-hoc analysis: structured run reports and comparisons, computed from the store."""
