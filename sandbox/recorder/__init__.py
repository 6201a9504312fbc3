"""Per-run access recorder: which workspace files each job's processes opened, read and
wrote, as the kernel saw it. A standalone program, standard library only, run on the host
(never inside a sandbox) as root, one per run, started with the run's sandbox and ending with
its supervisor (a pidfd on it); `a2rl.sandbox.access` starts, asks and stops it.

How: fanotify(7) with a mark on the whole filesystem of the run's workspace (each run's
workspace is its own loop-mounted ext4 volume, `sandbox/volume.py`; both backends bind
that folder, so one mark sees every open through any mount of it, a container's included).
The group is of the content class: an open (FAN_OPEN_PERM) waits until the recorder answers,
so its process is alive, and not yet reaped, while its job is found (`procs`: the parent
chain up to the job's shim, in the supervisor's table). Closes say read (FAN_CLOSE_NOWRITE)
or written (FAN_CLOSE_WRITE). Processes outside the sandbox (the server's revision scan, a
grader) are not the run's and are not recorded; a process of the sandbox that cannot be tied
to a job is recorded with job None ("unattributed"), never guessed.

Never in a job's way: every open is answered, whatever goes wrong with its event (a handler
that fails still answers), and a recorder that dies closes its group, which lets every pending
open through (the kernel's rule). A job then runs unrecorded, and the record says so.

Files (in `--dir`, host-only): `journal.jsonl` (start, rows, end and error lines, see
`ledger`), `recorder.sock` (the server's requests: a line `sync` drains the kernel's queue,
waits for pending hashes, flushes the journal and answers one JSON line).

Modules: `main` (the loop), `fanotify` (the ctypes binding), `procs` (pid to job), `naming`
(an event's file to its workspace path, checked by inode), `ledger` (rows, hashes, journal).
"""
