"""Politeness: 5 searches on one site that refuses, then recovers (issue 9), time compressed ×20.

Real scenario: the site answers 429 with Retry-After: 120 for 5 minutes, then challenge pages
for 5 more, then recovers. ×20: Retry-After 6 s, 15 s of 429, 15 s of challenge (30 s in all);
every tool gets the same compressed check interval (30 s → 1.5 s) and Notifio also gets its
ladders, spacing and max_wait divided by 20. urlwatch (and changedetection.io, in batch mode)
have no backoff: they run in a loop at the same interval. Figures come from the portal's log.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import NOTIFIO, Portal, free_port, log, notifio_config  # noqa: E402

SPEED = 20
WARM = 8.0  # seconds of normal service first (baselines)
RA = 6  # Retry-After 120 s / 20
PHASE = 15.0  # 429 for 15 s, then challenge for 15 s
AFTER = 20.0  # observe this long after recovery
INTERVAL = 1.5  # 30 s / 20
SEARCHES = 5


def script():
    return "%ds=429:%d,%ds=challenge,%ds=normal" % (WARM, RA, WARM + PHASE, WARM + 2 * PHASE)


def ms(s):
    return "%dms" % round(s * 1000)


def run_notifio(urls, work, stop_at):
    cfg = os.path.join(work, "notifio.toml")
    d = lambda secs: [ms(x / SPEED) for x in secs]  # noqa: E731
    notifio_config(cfg, os.path.join(work, "state"), urls, interval=ms(INTERVAL),
                   spacing=ms(2.0 / SPEED), concurrency=4,
                   backoff={"challenge": d([60, 180, 480, 900, 1800]),
                            "rate_limited": d([120, 300, 900, 1800]),
                            "denied": d([300, 900, 1800, 3600]),
                            "error": d([30, 120, 300]), "max_wait": ms(3600 / SPEED)})
    p = subprocess.Popen([NOTIFIO, "watch", "--config", cfg], stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(work, "notifio.err"), "w"),
                         start_new_session=True)
    time.sleep(max(0, stop_at - time.time()))
    os.kill(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()


def run_loop(cmd, env, stop_at, cwd=None):
    """Starts cmd every INTERVAL seconds (or right after the previous run if it took longer)."""
    runs = 0
    while time.time() < stop_at:
        t = time.time()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
        try:
            p.wait(timeout=max(1, stop_at - time.time() + 5))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        runs += 1
        time.sleep(max(0, INTERVAL - (time.time() - t)))
    return runs


def run_urlwatch(urls, work, stop_at, venv):
    uf = os.path.join(work, "urls.yaml")
    with open(uf, "w") as f:
        f.write("\n---\n".join('name: s%d\nurl: "%s"' % (i + 1, u) for i, u in enumerate(urls)))
    cf = os.path.join(work, "urlwatch.yaml")
    with open(cf, "w") as f:
        f.write("report:\n  stdout:\n    enabled: true\n    color: false\n")
    env = dict(os.environ, HOME=work, XDG_CONFIG_HOME=work, XDG_CACHE_HOME=work)
    return run_loop([os.path.join(venv, "bin", "urlwatch"), "--urls", uf, "--config", cf,
                     "--cache", os.path.join(work, "cache.db")], env, stop_at)


def run_cd(urls, work, stop_at, venv):
    env = dict(os.environ, HOME=work, ALLOW_IANA_RESTRICTED_ADDRESSES="true",
               FETCH_WORKERS="4", LOGGER_LEVEL="WARNING")
    exe = os.path.join(venv, "bin", "changedetection.py")
    ds = os.path.join(work, "datastore")
    first = [exe, "-d", ds, "-C", "-h", "127.0.0.1", "-p", str(free_port()), "-b"]
    for u in urls:
        first += ["-u", u]
    subprocess.run(first, env=env, cwd=work, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)
    return run_loop([exe, "-d", ds, "-h", "127.0.0.1", "-p", str(free_port()), "-b", "-r",
                     "all"], env, stop_at, cwd=work)


def analyse(log_path):
    lines = open(log_path).read().splitlines()
    t0 = int(lines[0].split()[2])
    reqs = sorted((int(x.split("\t")[0]) - t0) / 1000.0 for x in lines[1:]
                  if "\t/search/" in x)
    start, mid, end = WARM, WARM + PHASE, WARM + 2 * PHASE
    during = [t for t in reqs if start <= t < end]
    in_429 = [t for t in reqs if start <= t < mid]
    # Requests sent while an earlier 429's Retry-After was still running.
    early = sum(1 for t in reqs if any(a < t < a + RA for a in in_429))
    after = [t for t in reqs if t >= end]
    return {
        "during": len(during), "in_429": len(in_429), "in_challenge": len(during) - len(in_429),
        "before_retry_after": early,
        "recovery_s": (after[0] - end) if after else None,
        "timeline": during,
        "last_before": max([t for t in reqs if t < end], default=None),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", required=True)
    ap.add_argument("--tools", default="notifio,urlwatch,changedetection.io")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="notifio-polite-")
    rows = []
    for name in args.tools.split(","):
        d = os.path.join(work, name)
        os.makedirs(d)
        log_path = os.path.join(d, "portal.log")
        portal = Portal(1, SEARCHES, ["--page-bytes", "300000", "--script", script()],
                        log_path=log_path)
        stop_at = time.time() + WARM + 2 * PHASE + AFTER
        log("politeness: %s for %.0f s" % (name, stop_at - time.time()))
        try:
            urls = portal.all_urls()
            if name == "notifio":
                run_notifio(urls, d, stop_at)
            elif name == "urlwatch":
                run_urlwatch(urls, d, stop_at, args.venv)
            else:
                run_cd(urls, d, stop_at, args.venv)
        finally:
            portal.stop()
        a = analyse(log_path)
        log("  %s: %s" % (name, a))
        rows.append((name, a))
    print("Time compressed ×%d: Retry-After %d s (120 s), refusal %.0f s (10 min: %.0f s of 429, "
          "then challenge pages), check interval %.1f s (30 s) for every tool; Notifio's ladders, "
          "spacing (100 ms) and max_wait divided by %d as well. %d searches on one site.\n" %
          (SPEED, RA, 2 * PHASE, PHASE, INTERVAL, SPEED, SEARCHES))
    print("| tool | requests during refusal (429 / challenge) | requests before a Retry-After "
          "expired | first check after recovery | request times in the refusal (s from its start) |")
    print("|---|---|---|---|---|")
    for name, a in rows:
        rec = "%.1f s" % a["recovery_s"] if a["recovery_s"] is not None else "none"
        tl = ", ".join("%.1f" % (t - WARM) for t in a["timeline"][:12])
        if len(a["timeline"]) > 12:
            tl += ", …"
        print("| %s | %d (%d / %d) | %d | %s | %s |" % (
            name, a["during"], a["in_429"], a["in_challenge"], a["before_retry_after"], rec, tl))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
