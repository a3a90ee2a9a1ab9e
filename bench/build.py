"""How long the first build of Notifio takes, and what it costs (issue 38).

For each profile, from an empty target directory of its own (`target/bench-build/PROFILE`),
after `cargo fetch` (downloads are not timed): the wall time and the CPU time (user+sys of
every process, from wait4) of `cargo build --profile PROFILE -p notifio --locked`, the peak
memory, and the binary's size as built and stripped.

Peak memory is measured two ways. "Tree" samples, every 0.2 s, the sum of the resident sets of
every process under cargo (rustc, the linker, cc, build scripts): what the machine must hold
at once. "Largest" is wait4's ru_maxrss for the children, the figure `/usr/bin/time -v`
prints as "Maximum resident set size": the largest single process (usually the LTO link).

`--config KEY=VALUE` is passed to cargo (`--config 'profile.release.lto="thin"'`), to try a
variant without editing Cargo.toml; `--label` names it in the table.

`--watch SECONDS` then runs bench/watch.py for the built binaries *at the same time*, each with
its own fake portal (the way docs/benchmarks/watch.md compares two builds), `--pairs` times,
and prints each profile's CPU per check and the ratio to the first profile's. Python 3
stdlib only.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, log  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root):
    """Bytes resident in `root` and all its descendants right now (0 once it is gone)."""
    children = {}
    rss = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            with open("/proc/%s/statm" % entry) as f:
                resident = int(f.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            continue
        # The command name (field 2) may hold spaces and parentheses: the ppid follows the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        pid = int(entry)
        children.setdefault(ppid, []).append(pid)
        rss[pid] = resident
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


def out_dir(profile):
    """The directory cargo puts a profile's binaries in."""
    return {"dev": "debug", "test": "debug", "bench": "release"}.get(profile, profile)


def build(profile, configs, target, timings):
    """Builds from an empty `target`; returns the figures of one build."""
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    env = dict(os.environ, CARGO_TARGET_DIR=target, CARGO_TERM_COLOR="never")
    extra = []
    for c in configs:
        extra += ["--config", c]
    subprocess.run(["cargo", "fetch", "--locked", "-q"], cwd=ROOT, env=env, check=True)
    cmd = ["cargo", "build", "--profile", profile, "-p", "notifio", "--locked"] + extra
    if timings:
        cmd.append("--timings")
    log("building: " + " ".join(cmd))
    err = open(os.path.join(target, "build.log"), "w")
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=err, stderr=err)
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.wait(0.2):
            peak[0] = max(peak[0], tree_rss(p.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t0
    done.set()
    sampler.join()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("the build failed: see %s" % err.name)
    binary = os.path.join(target, out_dir(profile), "notifio")
    stripped = binary + ".stripped"
    subprocess.run(["strip", "-o", stripped, binary], check=True)
    return {
        "wall": wall,
        "cpu": ru.ru_utime + ru.ru_stime,
        "tree": peak[0] / 1e9,
        "largest": ru.ru_maxrss * 1024 / 1e9,
        "size": os.path.getsize(binary) / 1e6,
        "stripped": os.path.getsize(stripped) / 1e6,
        "binary": binary,
        "load": os.getloadavg()[0],
    }


def minutes(s):
    return "%d min %02d s" % (s // 60, s % 60)


WATCH_ROW = re.compile(r"^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| (-?\d+) \|$", re.M)


def watch_pair(binaries, seconds):
    """bench/watch.py for every binary at once; CPU ms per check and peak RSS of each."""
    here = os.path.dirname(os.path.abspath(__file__))
    procs = [subprocess.Popen([sys.executable, os.path.join(here, "watch.py"), "--duration",
                               str(seconds), "--validators", "--notifio", b],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for b in binaries]
    out = []
    for p in procs:
        text, _ = p.communicate()
        m = WATCH_ROW.search(text)
        if p.returncode != 0 or m is None:
            sys.exit("bench/watch.py failed:\n" + text)
        out.append((float(m.group(3)), float(m.group(4))))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profiles", nargs="*", default=["release", "dist"])
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to cargo --config, for every profile built")
    ap.add_argument("--label", help="what to call the variant in the table")
    ap.add_argument("--timings", action="store_true",
                    help="also write cargo's --timings report (target/bench-build/P/cargo-timings)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the existing builds in target/bench-build (for --watch only)")
    ap.add_argument("--watch", type=float, metavar="SECONDS",
                    help="then compare the binaries' CPU per check side by side, this long")
    ap.add_argument("--pairs", type=int, default=3, help="side-by-side watch runs (default 3)")
    args = ap.parse_args()
    base = os.path.join(ROOT, "target", "bench-build")
    results = []
    for profile in args.profiles:
        target = os.path.join(base, profile + ("-" + args.label if args.label else ""))
        if args.keep:
            results.append((profile, {"binary": os.path.join(target, out_dir(profile), "notifio")}))
            continue
        r = build(profile, args.config, target, args.timings)
        results.append((profile, r))
        log("%s: %s" % (profile, r))
    if not args.keep:
        print("| profile | wall | CPU (user+sys) | peak RSS, process tree | largest process | "
              "binary | stripped | load (1 min) at the end |")
        print("|---|---|---|---|---|---|---|---|")
        for profile, r in results:
            name = profile + (" (%s)" % args.label if args.label else "")
            print("| %s | %s | %s | %.2f GB | %.2f GB | %.1f MB | %.1f MB | %.1f |" % (
                name, minutes(r["wall"]), minutes(r["cpu"]), r["tree"], r["largest"],
                r["size"], r["stripped"], r["load"]))
        if args.config:
            print("\n(with --config %s)" % " --config ".join(args.config))
    if args.watch:
        portal = os.path.join(ROOT, "target", "release", "fake-portal")
        if not os.path.exists(portal):
            sys.exit("bench/watch.py needs %s: cargo build --release -p fake-portal" % portal)
        binaries = [r["binary"] for _, r in results]
        runs = []
        for i in range(args.pairs):
            log("side-by-side watch run %d of %d (%.0f s)" % (i + 1, args.pairs, args.watch))
            runs.append(watch_pair(binaries, args.watch))
            log("  " + ", ".join("%s %.3f ms/check %.1f MB" % (p, c, m)
                                  for (p, _), (c, m) in zip(results, runs[-1])))
        print("\n`bench/watch.py --validators --duration %.0f`, %d runs with the binaries side "
              "by side:\n" % (args.watch, args.pairs))
        print("| profile | CPU ms/check, each run | median | ratio to %s (median of the "
              "runs' ratios) | peak RSS MB (median) |" % results[0][0])
        print("|---|---|---|---|---|")
        for i, (profile, _) in enumerate(results):
            cpu = [run[i][0] for run in runs]
            ratio = statistics.median(run[i][0] / run[0][0] for run in runs)
            rss = statistics.median(run[i][1] for run in runs)
            print("| %s | %s | %.3f | %.3f | %.1f |" % (
                profile, ", ".join("%.3f" % c for c in cpu), statistics.median(cpu), ratio, rss))


if __name__ == "__main__":
    main()
