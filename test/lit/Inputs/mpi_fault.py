"""Starts an mpirun job, hurts one rank once the job has saved a checkpoint,
and reports how the job ended (test/lit/modrun/distributed-faults.test).

  mpi_fault.py kill|stop RANK CKPT LIMIT -- MPIRUN ARGS...

kill sends SIGKILL to rank RANK, stop sends SIGSTOP (the rank hangs). The
ranks are found among mpirun's descendants by OMPI_COMM_WORLD_RANK. Prints
the job's output, then "job ended: exit status N after S s", or "job hung"
(exit 1) when it did not end within LIMIT seconds after the signal. Any
process of the job still alive at the end is killed.

kill runs the job once more when mpirun names another rank's end instead
of RANK's: the surviving rank can crash inside Open MPI once its peer is
gone, and mpirun may notice that first (docs/testing.md). It prints one
line saying so, then the second run's report. A crash of ours after the
peer's death would name the other rank in both runs and still fail.
"""
import os
import re
import signal
import subprocess
import sys
import time

mode, rank, ckpt, limit = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
cmd = sys.argv[sys.argv.index("--") + 1:]


def descendants(root):
    children = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(pid))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def rank_of(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return entry.split(b"=", 1)[1].decode()
    except OSError:
        pass
    return None


def kill_all(job, victims):
    """Kills the job's processes, the ranks before mpirun (which would leave
    them to init, out of reach of descendants())."""
    for pid in descendants(job.pid) + victims + [job.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def attempt():
    """Runs the job, hurts rank RANK after the first checkpoint; returns
    (exit status for this script, report). Any process of the job still
    alive at the end is killed, whichever way it ends."""
    if os.path.exists(ckpt):
        os.remove(ckpt)
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, start_new_session=True)
    victims = []
    try:
        deadline = time.time() + 120
        while not os.path.exists(ckpt):
            if job.poll() is not None or time.time() > deadline:
                kill_all(job, victims)
                out = job.communicate()[0].decode(errors="replace")
                return 1, out + "\nthe job ended or stalled before its first checkpoint"
            time.sleep(0.05)
        victims = [p for p in descendants(job.pid) if rank_of(p) == rank]
        if not victims:
            return 1, "no process of rank %s found" % rank
        os.kill(victims[0], signal.SIGKILL if mode == "kill" else signal.SIGSTOP)
        start = time.time()
        try:
            out, _ = job.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            return 1, "job hung"
        return 0, out.decode(errors="replace") + "\njob ended: exit status %d after %.0f s" % (
            job.returncode, time.time() - start)
    finally:
        kill_all(job, victims)


status, report = attempt()
ended = re.search(r"process rank (\d+) .* exited on signal (\d+)", report)
if mode == "kill" and status == 0 and ended and ended.group(1) != rank:
    print("first run: mpirun named rank %s (signal %s), not rank %s; running again"
          % (ended.group(1), ended.group(2), rank))
    status, report = attempt()
print(report)
sys.exit(status)
