"""Helpers shared by the bench scripts: the fake portal, timed child processes, configs.

Python 3 stdlib only. Every child is started in its own process group and stopped by its
own pid at the end, so nothing outlives a run.
"""

import os
import resource
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, "target", "release")
NOTIFIO = os.path.join(RELEASE, "notifio")
PORTAL = os.path.join(RELEASE, "fake-portal")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def free_port_block(n):
    """A port P such that P..P+n-1 look free right now (best effort)."""
    for base in range(20000, 60000 - n, n + 7):
        ok = True
        for p in range(base, base + n):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return base
    raise RuntimeError("no free block of %d ports" % n)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Portal:
    """A running `fake-portal`; `urls` is one list of search URLs per site."""

    def __init__(self, sites, searches, extra=(), log_path=None):
        args = [PORTAL, "--sites", str(sites), "--searches", str(searches)] + list(extra)
        if log_path:
            args += ["--log", log_path]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, start_new_session=True)
        self.urls = []
        deadline = time.time() + 30
        while len(self.urls) < sites:
            line = self.proc.stdout.readline()
            if not line or time.time() > deadline:
                self.stop()
                raise RuntimeError("fake-portal did not start")
            parts = line.split()
            self.urls.append(parts[2:])

    def all_urls(self):
        return [u for site in self.urls for u in site]

    def add_everywhere(self):
        """One new listing on every search of every site (SIGUSR1)."""
        os.kill(self.proc.pid, signal.SIGUSR1)
        time.sleep(0.3)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def timed(cmd, env=None, timeout=900, stdout=subprocess.DEVNULL, cwd=None):
    """Runs cmd to completion; returns dict(wall, cpu, rss_mb, rc) from wait4's rusage.

    The rusage of wait4 covers the child and every descendant it waited for; max RSS is the
    largest single process of that tree (Linux semantics)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd,
                         start_new_session=True)
    deadline = t0 + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            pid, status, ru = os.wait4(p.pid, 0)
            break
        time.sleep(0.02)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024.0,
            "rc": p.returncode, "stderr": err[-2000:]}


def proc_cpu(pid):
    """utime+stime (s) of a live process, its threads and waited-for children (/proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    # fields[11..14] = utime stime cutime cstime (0-based after the comm field)
    return sum(int(x) for x in fields[11:15]) / tck


def proc_hwm_mb(pid):
    """Peak RSS (VmHWM) of a live process, MB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def notifio_config(path, state_dir, urls, interval="30s", spacing="2s", concurrency=10,
                   backoff=None, extra=""):
    lines = ["[watch]", 'interval = "%s"' % interval, 'spacing = "%s"' % spacing,
             "concurrency = %d" % concurrency, "state_dir = %s" % toml_str(state_dir),
             "dashboard = false", ""]
    if backoff:
        lines.append("[backoff]")
        for k, v in backoff.items():
            if isinstance(v, list):
                lines.append("%s = [%s]" % (k, ", ".join(toml_str(x) for x in v)))
            else:
                lines.append("%s = %s" % (k, toml_str(v)))
        lines.append("")
    lines.append(extra)
    for i, u in enumerate(urls):
        lines += ["[[search]]", 'name = "s%d"' % (i + 1), "url = %s" % toml_str(u),
                  'listing = { selector = "article.listing", id_attr = "data-id" }', ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def toml_str(s):
    return '"%s"' % str(s).replace("\\", "\\\\").replace('"', '\\"')


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return float("nan")
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
