"""Per-run job supervisor: a standalone program, standard library only.

It runs inside bubblewrap or a container (or, unisolated, as a plain detached process) where only
this folder is visible (mounted read-only at /a2rl/supervisor and run as `python -I
/a2rl/supervisor`, see __main__.py), so nothing here imports a2rl, and its modules import each
other relatively. It listens on a unix socket and speaks JSON lines: one request object per
line, one response object per line, several connections at once.

One job per module: `main` (the command line and the wiring), `dispatch` (a request to the
operation that answers it), `jobs` (starting jobs, their logs, how each ended), `kill` (ending a
job's whole process tree and reaping it), `watches` (the process and disk limits, the
deadline), `shim` (how a job's processes are made and lose their privileges), `job` (a job's
record, the limits) and `system` (prctl, /proc, the log).

Every request carries the token the launcher wrote on stdin: {"token": ..., "op": ..., ...}.
Responses are {"ok": true, ...} or {"ok": false, "error": "..."}. Operations:

    ping                                   -> {"ok", "pid", "started", "deadline"}
    spawn {job_id, command, env}           -> {"ok", "job"}
    get {job_id}                           -> {"ok", "job"}
    wait {job_id, timeout}                 -> {"ok", "job"}  (returns early when the job ends)
    wait_any {job_ids, timeout}            -> {"ok", "jobs"} (early once one of them ends)
    list                                   -> {"ok", "jobs"}
    shims                                  -> {"ok", "shims": [[shim pid, job id], ...]}
    kill {job_id, cause?, evidence?}       -> {"ok", "job"}
    set_deadline {deadline}                -> {"ok", "deadline"}
    shutdown {cause?, evidence?}           -> {"ok"} once every job is killed; then it exits

Out of the jobs' reach. In a sandbox the supervisor is the pid namespace's init (pid 1) and
installs no signal handler, so the kernel drops every signal a job sends it, SIGKILL and SIGSTOP
included; it is not dumpable (no ptrace, no /proc/1/{mem,environ,fd} for a job). Its listening
socket is bound by the launcher outside the sandbox and handed over as an inherited descriptor
(`--listen-fd`): no path to it exists inside. When it starts as root, every job drops to the
sandbox user (`--uid/--gid`: no groups, no capabilities, no_new_privs) before running anything.

A job is `bash -c command` in the workspace, stdin /dev/null, stdout and stderr a pipe that the
supervisor copies into the job's log `<job_id>.log` in a folder only it can write (`--logs-fd`,
a directory descriptor, or `--logs-dir`), shown read-only to jobs at `--logs-view`, and linked
from workspace/logs/<job_id>.log by the job itself. Each job runs under its own
forked *shim* (which keeps the supervisor's user: a job cannot signal it): a session leader and
child subreaper, so whatever the command double-forks or setsids stays in the shim's tree, and
`kill` finds it there. The job ends when bash exits; leftovers it started in the background keep
running, under the shim, until the job is killed or the sandbox stops.

Limits the supervisor enforces itself (the kernel's cgroup or container limits stay the hard
wall): a log over `--log-limit` bytes ends the job ("log flood"); a job with `--pids-limit`
processes is ended; a workspace over `--disk-limit` bytes ends the job writing it; files are
capped by RLIMIT_FSIZE (`--fsize-limit`). The reason is kept in the job's `reason` and appended
to its log, so the agent reads it with the output.

Exit codes: a job that dies of signal N has exit_code -N (the convention of Python's
subprocess); bash itself reports 128+N when the command was not its last simple command, and
that code is kept as is. A job the supervisor killed has state `killed` (or `timeout` at the
deadline) and exit_code -9. `pid` is bash's pid as seen inside the sandbox's pid namespace.

Why a job ended is its `cause`, with one line of `evidence`, decided here where it is known: a
kill names who asked for it (the server passes `cause` with `kill`: "job_kill", "budget",
"interrupted", ...), the deadline is "deadline", a limit is "limit", and an exit by SIGKILL is
"out_of_memory" only when the memory cgroup's `oom_kill` count rose during the job; any other
death by a signal is "signal" (sent from inside the job), else "exited".
"""
