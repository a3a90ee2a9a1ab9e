"""`notifio watch` under load (issue 7): 1,000 searches over 100 fake sites, interval 30 s.

Measures the watcher process only (not the portal): CPU (user+sys, from wait4 after SIGTERM),
peak RSS (wait4's maxrss, cross-checked with VmHWM), and the number of checks (search-page
requests the portal logged while the watcher ran). New listings appear on one search per site
every 30 s, so some checks find something new and go through notification enqueueing.

To compare two builds side by side, `--notifio OTHER_TREE/target/release/notifio` measures
another build's watcher with this driver and this tree's fake portal (same pages, same config).
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
from common import NOTIFIO, Portal, log, notifio_config, proc_cpu, proc_hwm_mb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", type=int, default=100)
    ap.add_argument("--per-site", type=int, default=10)
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--interval", default="30s")
    ap.add_argument("--concurrency", type=int, default=16,
                    help="[watch] concurrency (the product's default is 4)")
    ap.add_argument("--validators", action="store_true",
                    help="let the portal send ETags (unchanged pages come back as 304)")
    ap.add_argument("--perf", action="store_true", help="record with perf for the profile")
    ap.add_argument("--perf-from", type=float, metavar="SECONDS",
                    help="instead of --perf: attach perf this long after the start, for the "
                    "rest of the run (a steady-state profile without the first pass)")
    ap.add_argument("--perf-call-graph", default="fp",
                    help="perf's --call-graph mode for --perf-from (e.g. dwarf,16384)")
    ap.add_argument("--notifio", default=NOTIFIO, metavar="PATH",
                    help="the watcher binary to measure (default: this tree's release build)")
    ap.add_argument("--new-every", default="30s",
                    help="a new listing on one search per site this often; 'never' for none")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="notifio-watch-bench-")
    extra = ["--page-bytes", "300000"]
    if args.new_every != "never":
        extra += ["--new-every", args.new_every]
    if not args.validators:
        extra.append("--no-validators")
    log_path = os.path.join(work, "portal.log")
    portal = Portal(args.sites, args.per_site, extra, log_path=log_path)
    cfg = os.path.join(work, "notifio.toml")
    notifio_config(cfg, os.path.join(work, "state"), portal.all_urls(), interval=args.interval,
                   concurrency=args.concurrency)
    cmd = [args.notifio, "watch", "--config", cfg]
    if args.perf:
        cmd = ["perf", "record", "-g", "-o", os.path.join(os.getcwd(), "perf.data"), "--"] + cmd
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(work, "notifio.err"), "w"),
                         start_new_session=True)
    hwm, samples, perf = 0.0, [], None
    try:
        while time.time() - t0 < args.duration:
            step = min(15, max(0.1, args.duration - (time.time() - t0)))
            if args.perf_from is not None and perf is None:
                step = min(step, max(0.1, args.perf_from - (time.time() - t0)))
            time.sleep(step)
            if args.perf:
                continue
            if args.perf_from is not None and perf is None and time.time() - t0 >= args.perf_from:
                perf = subprocess.Popen(
                    ["perf", "record", "-F", "999", "--call-graph", args.perf_call_graph,
                     "-o", os.path.join(os.getcwd(), "perf.data"), "-p", str(p.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True)
                log("perf attached at t=%.0fs" % (time.time() - t0))
            try:
                hwm = max(hwm, proc_hwm_mb(p.pid))
                samples.append((time.time() - t0, proc_cpu(p.pid), hwm))
                log("t=%3.0fs  cpu %.2fs  peak RSS %.1f MB" % samples[-1])
            except OSError:
                break
    finally:
        t_end = time.time()
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        os.kill(p.pid, signal.SIGTERM)
        _, status, ru = os.wait4(p.pid, 0)
        portal.stop()
    cpu = ru.ru_utime + ru.ru_stime
    rss = ru.ru_maxrss / 1024.0
    lines = open(log_path).read().splitlines()[1:]
    checks = sum(1 for x in lines if "\t/search/" in x
                 and t0 * 1000 <= int(x.split("\t")[0]) <= t_end * 1000)
    full = sum(1 for x in lines if "\t/search/" in x and x.split("\t")[4] == "-")
    err = open(os.path.join(work, "notifio.err")).read().strip().splitlines()
    print("%s: searches %d over %d sites, interval %s, %.0f s, validators %s" % (
        args.notifio, args.sites * args.per_site, args.sites, args.interval, t_end - t0,
        "on (304s)" if args.validators else "off (every check downloads ~300 KB)"))
    print("| checks | CPU s (user+sys) | CPU ms/check | peak RSS MB | exit |")
    print("|---|---|---|---|---|")
    print("| %d | %.2f | %.3f | %.1f | %s |" % (checks, cpu, 1000 * cpu / max(checks, 1), rss,
                                              os.waitstatus_to_exitcode(status)))
    print("\n(%d of the checks were unconditional; steady-state CPU from the samples: %s)" % (
        full, steady(samples, args.sites * args.per_site, args.interval)))
    if err:
        print("\nwatcher stderr (last lines): " + " / ".join(err[-3:]))
    shutil.rmtree(work, ignore_errors=True)


def steady(samples, searches, interval):
    """CPU per second between the first sample after 60 s and the last sample, and that
    divided by the checks per second the schedule asks for (searches / interval)."""
    s = [x for x in samples if x[0] >= 60]
    if len(s) < 2:
        return "run too short"
    (ta, ca, _), (tb, cb, _) = s[0], s[-1]
    per_s = 1000 * (cb - ca) / (tb - ta)
    text = "%.1f ms CPU per second of watching from t=%.0fs to t=%.0fs" % (per_s, ta, tb)
    if interval.endswith("s") and interval[:-1].isdigit():
        text += " -> %.3f ms per check at %.1f checks/s" % (
            per_s * int(interval[:-1]) / searches, searches / int(interval[:-1]))
    return text


if __name__ == "__main__":
    main()
