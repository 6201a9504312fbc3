"""ALFWorld: household tasks in a text world (level 3, interactive)."""
