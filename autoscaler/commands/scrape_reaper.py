"""What the scrape workers' launcher becomes once it has forked them (`scrape_worker.py`):
``python -I -S scrape_reaper.py PID ...``, the workers' parent, so the controller learns
how each one ended.

It imports the standard library only (``-S``: no site-packages): the launcher's import
heap, which the workers share copy-on-write, is gone from it with the exec; ~3-4 MB of
its own stay. On stdout, for the controller: ``exit PID CODE`` once a worker has exited
and been reaped (CODE as `subprocess` gives it: negative for a signal). On stdin: ``kill
PID`` SIGKILLs a worker not yet reaped (only this process knows a PID has not been
reused). It exits once every worker is reaped; EOF on stdin (the controller gone) changes
nothing: the workers end on their own stdin's EOF, and are reaped as they do.
"""

import contextlib
import os
import select
import signal
import sys


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the controller stops us
    children = {int(pid) for pid in argv}
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)  # a SIGCHLD wakes select below
    commands_open, pending = True, b""

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                return
            if pid == 0:
                return
            if pid in children:
                children.discard(pid)
                code = os.waitstatus_to_exitcode(status)
                with contextlib.suppress(BrokenPipeError):  # controller gone: keep reaping
                    os.write(1, f"exit {pid} {code}\n".encode())

    reap()
    while children:
        watched = [wake_r, 0] if commands_open else [wake_r]
        ready, _, _ = select.select(watched, [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
        if 0 in ready:
            data = os.read(0, 4096)
            if not data:
                commands_open = False
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                verb, _, pid = line.partition(b" ")
                if verb == b"kill" and pid.isdigit() and int(pid) in children:
                    with contextlib.suppress(ProcessLookupError):  # exited: reaped below
                        os.kill(int(pid), signal.SIGKILL)
        reap()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
