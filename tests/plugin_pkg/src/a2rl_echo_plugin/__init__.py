"""An example a2rl plugin: the `echo` task and the `idle` agent (see docs/adding-a-task.md)."""
