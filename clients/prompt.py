"""The task prompt every connector hands its agent, written once."""

from __future__ import annotations

from a2rl.store import Run


def task_prompt(run: Run) -> str:
    minutes = run.budget_s / 60
    limit = (f"You may submit at most {run.max_submissions} times. " if run.max_submissions
             else "You may submit as often as you like. ")
    split = f"a hidden {run.config.feedback_split} split"
    return (
        f"You are post-training a base model for the task '{run.task_id}'. Use only the tools of "
        f"the MCP server named 'a2rl'. Start by reading TASK.md (read_file) and listing the "
        f"workspace (list_files). The base model is in base_model/ and the training data in "
        f"data/ (both read-only); write your code under code/ and save checkpoints under "
        f"output/ with save_pretrained (model and tokenizer). Run training with run_command: "
        f"long commands become background jobs; poll them with job_status(job_id, wait_s=30). "
        f"Submit a checkpoint directory with submit_checkpoint(path) and read its score with "
        f"get_score(submission_id, wait_s=60); submissions are scored on {split}, and the run's "
        f"result is its best submission, scored at the end. {limit}"
        f"You have {minutes:.0f} minutes of wall-clock time in all (budget_status tells what "
        f"is left); at the deadline everything stops. Improve the score as much as you can, "
        f"then stop."
    )
