"""The browser benchmark (issue 22), side by side in one run on 127.0.0.1.

Called by bench/browser.sh (which builds the release binaries and the throwaway venv). Three
parts, each against its own `fake-portal` process:

1. **Same 50 pages, three tools, alternating.** 50 sites with one search each (so the per-site
   spacing never binds), ~300 KB pages whose cards a script builds 100 ms after load (plain
   HTTP sees none), no validators (every read downloads the whole page), and one new listing on
   every page before each tool's round. Each round, in rotating order:
   - `notifio check --json` (release build, `fetch = "browser"` on every site, the default
     `[browser]`: Notifio starts its own Chromium with its persistent profile);
   - changedetection.io in batch mode (`-b`), every watch `fetch_backend = "html_webdriver"`,
     `PLAYWRIGHT_DRIVER_URL` = the `webSocketDebuggerUrl` of a Chromium started here;
   - bench/browser_floor.py: Playwright `connect_over_cdp` to such a Chromium, one tab reused.
   The two peers get a fresh Chromium per round with the same command line Notifio uses.
2. **The 20-image page**: `notifio check` of it with the default `block`, then with
   `block = []`; the portal's byte counts.
3. **Soak**: `notifio watch` of 100 searches over 10 browser sites for 5 minutes; the browser
   tree's PSS every 5 s.

Measured per tool round: CPU = wait4's rusage of the tool's process (it and every descendant it
reaped: for Notifio that includes its browser) + for the peers, the growth of utime+stime+
cutime+cstime summed over every pid of their browser's tree (/proc/PID/stat); wall; PSS (sum
of `Pss` in /proc/PID/smaps_rollup over the tree, sampled every 0.5 s: the peak); bytes and
requests the portal served (its SIGUSR2 report). Markdown on stdout, progress on stderr.
"""

import argparse
import json
import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import NOTIFIO, Portal, free_port, log, median, toml_str  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TCK = os.sysconf("SC_CLK_TCK")
CARD = 'article.listing'


# --- /proc: process trees, CPU, PSS ---------------------------------------------------------

def proc_table():
    """pid -> (ppid, starttime, own ticks, children's ticks) for every process now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the comm field: [1] ppid, [11] utime, [12] stime, [13] cutime, [14] cstime,
        # [19] starttime.
        out[int(name)] = (int(fields[1]), int(fields[19]), int(fields[11]) + int(fields[12]),
                          int(fields[13]) + int(fields[14]))
    return out


def tree(root, table):
    """root and every live descendant of it."""
    if root not in table:
        return []
    kids = {}
    for pid, row in table.items():
        kids.setdefault(row[0], []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def tree_ticks(root):
    """utime+stime+cutime+cstime summed over a live tree (children it reaped included)."""
    table = proc_table()
    return sum(table[p][2] + table[p][3] for p in tree(root, table))


def pss_kb(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Samples the PSS of a tool's tree and of its browser's tree every `period` seconds.

    `tool` is the tool's pid; `browser` the pid of the browser we started for it, or None when
    the tool starts its own (Notifio): then the browser tree is the tool's descendants.
    Keeps the peaks, a time series, and each pid's last own CPU (a cross-check of wait4)."""

    def __init__(self, tool, browser=None, period=0.5):
        super().__init__(daemon=True)
        self.tool, self.browser, self.period = tool, browser, period
        self.stop_flag = threading.Event()
        self.peak_tool = self.peak_browser = 0
        self.series = []  # (t, tool kB, browser kB, browser processes)
        self.own = {}  # (pid, starttime) -> own ticks last seen, browser side
        self.tool_own = 0
        self.tool_pids = set()
        self.t0 = time.monotonic()

    def sample(self):
        table = proc_table()
        tool_tree = tree(self.tool, table)
        if self.browser is None:
            tool_pids, browser_pids = tool_tree[:1], tool_tree[1:]
        else:
            tool_pids, browser_pids = tool_tree, tree(self.browser, table)
        t = sum(pss_kb(p) for p in tool_pids)
        b = sum(pss_kb(p) for p in browser_pids)
        self.peak_tool, self.peak_browser = max(self.peak_tool, t), max(self.peak_browser, b)
        self.series.append((time.monotonic() - self.t0, t, b, len(browser_pids)))
        for p in browser_pids:
            self.own[(p, table[p][1])] = table[p][2]
        self.tool_pids.update(tool_pids)
        if self.tool in table:
            self.tool_own = table[self.tool][2]

    def run(self):
        while not self.stop_flag.is_set():
            self.sample()
            self.stop_flag.wait(self.period)

    def stop(self):
        self.stop_flag.set()
        self.join()


def become_subreaper():
    """Makes this process the reaper of every orphan below it (prctl PR_SET_CHILD_SUBREAPER).

    A browser's helpers (zygote, renderers, GPU and network services) are killed with its
    process group when it stops and are then reaped by whoever adopts them, not by the tool
    that started the browser: without this their CPU would vanish from every rusage. Adopted
    by us, their whole CPU lands in our RUSAGE_CHILDREN once we reap them."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_adopted(pids, keep, wait=10.0):
    """Reaps the processes of a finished tool's tree that we adopted, waiting for them to end
    (they were killed with their group; a few ms)."""
    me = os.getpid()
    deadline = time.monotonic() + wait
    todo = set(pids) - set(keep)
    while todo and time.monotonic() < deadline:
        for pid in list(todo):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                # Not (or no longer) ours: reaped by its own parent, or never adopted.
                try:
                    with open("/proc/%d/stat" % pid) as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    ppid = None
                if ppid != me:
                    todo.discard(pid)
                continue
            if done:
                todo.discard(pid)
        time.sleep(0.02)
    if todo:
        log("  note: %d adopted processes still alive after %.0fs" % (len(todo), wait))


def run_measured(cmd, env=None, browser=None, timeout=1800, stdout=subprocess.DEVNULL, cwd=None,
                 period=0.5):
    """Runs `cmd` to completion while sampling; returns wall, CPU (s) and PSS peaks (MB).

    CPU: our RUSAGE_CHILDREN across the run (the tool, every descendant it reaped, and every
    orphan of its tree we adopted and reaped) + for a browser we started for it (`browser`),
    the growth of utime+stime+cutime+cstime over that browser's live tree."""
    before = tree_ticks(browser) if browser else 0
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE, cwd=cwd,
                         start_new_session=True)
    err = []
    reader = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
    reader.start()
    s = Sampler(p.pid, browser, period)
    s.start()
    deadline = t0 + timeout
    try:
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(p.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
    except BaseException:
        # Interrupted: the tool (its own process group) goes with us.
        os.killpg(p.pid, signal.SIGKILL)
        raise
    wall = time.monotonic() - t0
    s.stop()
    reader.join(5)
    keep = tree(browser, proc_table()) if browser else []
    reap_adopted({pid for pid, _ in s.own} | s.tool_pids, keep)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    tool_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    waited = ru.ru_utime + ru.ru_stime
    browser_cpu = (tree_ticks(browser) - before) / TCK if browser else None
    sampled_browser = sum(s.own.values()) / TCK
    r = {"wall": wall, "rc": os.waitstatus_to_exitcode(status),
         "stderr": (err[0] if err else b"").decode(errors="replace")[-3000:],
         "pss_tool": s.peak_tool / 1024, "pss_browser": s.peak_browser / 1024,
         "series": s.series}
    r["cpu_waited"] = waited
    if browser is None:
        # The browser is the tool's child: all of it is in the rusage. The split is from the
        # samples (the tool's own time as last seen, at most one period short).
        r["cpu"] = tool_cpu
        r["cpu_self"] = s.tool_own / TCK
        r["cpu_browser"] = tool_cpu - r["cpu_self"]
        if sampled_browser > r["cpu_browser"] + 0.1:
            log("  note: sampled browser CPU %.2fs > the rusage's share %.2fs"
                % (sampled_browser, r["cpu_browser"]))
    else:
        r["cpu"] = tool_cpu + browser_cpu
        r["cpu_self"] = tool_cpu
        r["cpu_browser"] = browser_cpu
    return r


# --- the portal ---------------------------------------------------------------------------

class CountingPortal(Portal):
    """A `fake-portal` whose SIGUSR2 report (bytes and requests per site) can be read."""

    def __init__(self, sites, searches, extra=(), log_path=None):
        super().__init__(sites, searches, extra, log_path=log_path)
        self.names = [u[0].split("/")[2] for u in self.urls]  # 127.0.0.1:PORT per site
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)

    def served(self):
        """(requests, bytes) summed over every site so far."""
        os.kill(self.proc.pid, signal.SIGUSR2)
        req = sent = 0
        while True:
            parts = self.lines.get(timeout=20).split()
            if parts[:2] == ["served", "end"]:
                return req, sent
            if parts and parts[0] == "served":
                req += int(parts[2])
                sent += int(parts[3])


# --- a Chromium for the peers ---------------------------------------------------------------

def chromium_args(profile):
    """Notifio's own command line (crates/notifio/src/fetch/browser/process.rs, launch_args),
    so that the peers' browser is the same browser run the same way."""
    args = ["--remote-debugging-port=0", "--user-data-dir=" + profile, "--no-first-run",
            "--no-default-browser-check", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-default-apps",
            "--password-store=basic", "--use-mock-keychain",
            "--js-flags=--max-old-space-size=512", "--disable-dev-shm-usage",
            "--disable-features=BackForwardCache", "--disable-background-timer-throttling",
            "--headless", "--mute-audio"]
    if os.geteuid() == 0:
        args.append("--no-sandbox")
    return args + ["about:blank"]


class Chromium:
    def __init__(self, executable, profile):
        os.makedirs(profile, exist_ok=True)
        self.proc = subprocess.Popen([executable] + chromium_args(profile),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True, text=True)
        deadline = time.time() + 30
        port = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            if "DevTools listening on ws://" in line:
                port = int(line.split("ws://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
                break
        if port is None:
            self.stop()
            raise RuntimeError("chromium did not start")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        with urllib.request.urlopen("http://127.0.0.1:%d/json/version" % port, timeout=10) as r:
            self.ws = json.load(r)["webSocketDebuggerUrl"]
        self.pid = self.proc.pid
        time.sleep(1)  # let its start-up settle before the round's CPU is counted

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


# --- the tools ------------------------------------------------------------------------------

def notifio_config(path, work, urls, extra_browser="", watch=None):
    watch = watch or {}
    lines = ["[watch]",
             'interval = "%s"' % watch.get("interval", "1h"),
             'spacing = "%s"' % watch.get("spacing", "2s"),
             "state_dir = %s" % toml_str(os.path.join(work, "state")),
             "dashboard = false", "",
             "[browser]", "profile_dir = %s" % toml_str(os.path.join(work, "profile")),
             extra_browser, ""]
    sites = []
    for i, u in enumerate(urls):
        lines += ["[[search]]", 'name = "s%d"' % (i + 1), "url = %s" % toml_str(u),
                  'listing = { selector = "%s", id_attr = "data-id" }' % CARD, ""]
        site = u.split("/")[2]
        if site not in sites:
            sites.append(site)
    for site in sites:
        lines += ["[site.%s]" % toml_str(site), 'fetch = "browser"', ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


class Notifio:
    name = "notifio"

    def __init__(self, work, urls, args):
        self.work = work
        os.makedirs(work, exist_ok=True)
        self.cfg = os.path.join(work, "notifio.toml")
        notifio_config(self.cfg, work, urls)

    def run(self, n):
        out = os.path.join(self.work, "out-%d.jsonl" % n)
        with open(out, "w") as f:
            r = run_measured([NOTIFIO, "check", "--json", "--config", self.cfg], stdout=f)
        rows = [json.loads(x) for x in open(out) if x.strip()]
        r["ok"] = sum(1 for x in rows if x.get("outcome") == "ok" and x.get("via") == "browser")
        r["cards"] = sum(len(x.get("listings") or []) for x in rows)
        return r


class Changedetection:
    name = "changedetection.io"

    def __init__(self, work, urls, args):
        self.work, self.urls, self.args = work, urls, args
        os.makedirs(work, exist_ok=True)
        self.datastore = os.path.join(work, "datastore")
        self.first = True

    def run(self, n):
        browser = Chromium(self.args.chromium, os.path.join(self.work, "profile-%d" % n))
        try:
            env = dict(os.environ, HOME=self.work, ALLOW_IANA_RESTRICTED_ADDRESSES="true",
                       FETCH_WORKERS=str(self.args.workers), LOGGER_LEVEL="WARNING",
                       PLAYWRIGHT_DRIVER_URL=browser.ws)
            cmd = [os.path.join(self.args.venv, "bin", "changedetection.py"), "-d",
                   self.datastore, "-h", "127.0.0.1", "-p", str(free_port()), "-b"]
            if self.first:
                cmd.append("-C")
                for i, u in enumerate(self.urls):
                    cmd += ["-u", u, "-u%d" % i, '{"fetch_backend": "html_webdriver"}']
                self.first = False
            else:
                cmd += ["-r", "all"]
            r = run_measured(cmd, env=env, browser=browser.pid, cwd=self.work)
        finally:
            browser.stop()
        r["ok"] = snapshots(self.datastore)
        r["cards"] = None
        return r


def snapshots(datastore):
    """Watches of changedetection.io's datastore that have at least one snapshot."""
    n = 0
    for root, _, files in os.walk(datastore):
        if "history.txt" in files:
            n += 1
    return n


class Floor:
    name = "playwright, one tab"

    def __init__(self, work, urls, args):
        self.work, self.args = work, args
        os.makedirs(work, exist_ok=True)
        self.urls_file = os.path.join(work, "urls.txt")
        with open(self.urls_file, "w") as f:
            f.write("\n".join(urls) + "\n")

    def run(self, n):
        browser = Chromium(self.args.chromium, os.path.join(self.work, "profile-%d" % n))
        out = os.path.join(self.work, "out-%d.json" % n)
        try:
            with open(out, "w") as f:
                r = run_measured([os.path.join(self.args.venv, "bin", "python"),
                                  os.path.join(HERE, "browser_floor.py"), browser.ws,
                                  self.urls_file], browser=browser.pid, stdout=f)
        finally:
            browser.stop()
        try:
            res = json.load(open(out))
            r["ok"], r["cards"] = res["pages"], res["cards"]
        except (OSError, ValueError, KeyError):
            r["ok"], r["cards"] = 0, 0
        return r


TOOLS = {"notifio": Notifio, "changedetection.io": Changedetection, "floor": Floor}


# --- the parts ------------------------------------------------------------------------------

def loadavg():
    return "%.1f" % os.getloadavg()[0]


def same_pages(args, work):
    extra = ["--page-bytes", str(args.page_bytes), "--no-validators",
             "--render-after", args.render_after]
    log_path = os.path.join(work, "portal.log")
    portal = CountingPortal(args.pages, 1, extra, log_path=log_path)
    urls = portal.all_urls()
    names = [t for t in args.tools.split(",") if t]
    tools = [TOOLS[t](os.path.join(work, t), urls, args) for t in names]
    rows = []
    try:
        for n in range(args.rounds):
            order = tools[n % len(tools):] + tools[:n % len(tools)]
            for tool in order:
                portal.add_everywhere()
                load = loadavg()
                req0, bytes0 = portal.served()
                log("round %d  %-20s (load %s) ..." % (n + 1, tool.name, load))
                t0 = time.time()
                r = tool.run(n)
                req1, bytes1 = portal.served()
                r.update(tool=tool.name, round=n + 1, load=load, requests=req1 - req0,
                         bytes=bytes1 - bytes0, window=(t0 * 1000, time.time() * 1000))
                log("round %d  %-20s wall %.1fs cpu %.2fs (self %.2f, browser %.2f) "
                    "PSS tool %.0f MB browser %.0f MB, %d requests, %.1f MB, ok %s rc %s" % (
                        n + 1, tool.name, r["wall"], r["cpu"], r["cpu_self"], r["cpu_browser"],
                        r["pss_tool"], r["pss_browser"], r["requests"], r["bytes"] / 1e6,
                        r["ok"], r["rc"]))
                if r["rc"] != 0:
                    log("  stderr: " + r["stderr"].strip().replace("\n", "\n  "))
                rows.append(r)
    finally:
        portal.stop()
    reading_spans(log_path, rows)
    return rows


def reading_spans(log_path, rows):
    """Each round's reading span: from its first result-page request to its last, as the
    portal logged them (a tool's start-up and shutdown, and changedetection.io's idle start,
    are outside it)."""
    try:
        lines = [x.split("\t") for x in open(log_path).read().splitlines()
                 if not x.startswith("#")]
    except OSError:
        lines = []
    for r in rows:
        a, b = r["window"]
        ats = [int(x[0]) for x in lines if a <= int(x[0]) <= b and x[3].startswith("/search/")]
        r["span"] = (max(ats) - min(ats)) / 1000 if len(ats) > 1 else float("nan")


def image_page(args, work):
    extra = ["--page-bytes", str(args.page_bytes), "--no-validators", "--images", "20"]
    portal = CountingPortal(2, 1, extra)
    out = []
    try:
        for i, (label, block) in enumerate([("default block", ""), ("block = []",
                                                                    "block = []")]):
            d = os.path.join(work, "images-%d" % i)
            os.makedirs(d)
            cfg = os.path.join(d, "notifio.toml")
            notifio_config(cfg, d, [portal.urls[i][0]], extra_browser=block)
            req0, b0 = portal.served()
            r = run_measured([NOTIFIO, "check", "--json", "--config", cfg])
            req1, b1 = portal.served()
            out.append((label, req1 - req0, b1 - b0, r["rc"]))
            log("image page, %s: %d requests, %d bytes, rc %d" % (label, req1 - req0,
                                                                  b1 - b0, r["rc"]))
    finally:
        portal.stop()
    return out


def soak(args, work):
    extra = ["--page-bytes", str(args.page_bytes), "--no-validators",
             "--render-after", args.render_after, "--new-every", "30s"]
    portal = CountingPortal(10, 10, extra)
    d = os.path.join(work, "soak")
    os.makedirs(d)
    cfg = os.path.join(d, "notifio.toml")
    notifio_config(cfg, d, portal.all_urls(), watch={"interval": args.soak_interval})
    p = None
    try:
        req0, b0 = portal.served()
        p = subprocess.Popen([NOTIFIO, "watch", "--config", cfg], stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(d, "notifio.err"), "w"),
                             start_new_session=True)
        s = Sampler(p.pid, None, period=5.0)
        s.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.soak_seconds and p.poll() is None:
            time.sleep(1)
            if int(time.monotonic() - t0) % 30 == 0 and s.series:
                t, tk, bk, nb = s.series[-1]
                log("soak t=%3.0fs  browser PSS %.0f MB (%d processes), notifio %.0f MB"
                    % (t, bk / 1024, nb, tk / 1024))
        s.stop()
        ticks = proc_table().get(p.pid)
        req1, b1 = portal.served()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        os.kill(p.pid, signal.SIGTERM)
        _, status, _ = os.wait4(p.pid, 0)
        reap_adopted({pid for pid, _ in s.own}, [])
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    finally:
        if p is not None and p.poll() is None:
            p.kill()
        portal.stop()
    series = s.series
    at_1m = [b for t, _, b, _ in series if t >= 60]
    first = at_1m[0] if at_1m else 0
    after = max(at_1m) if at_1m else 0
    last_min = [b for t, _, b, _ in series if t >= series[-1][0] - 60]
    # The median of each minute: PSS is a sawtooth (a tab's renderer grows with the pages it
    # has read until the tab is replaced), so single samples swing by ±10%.
    minutes = []
    for m in range(int(series[-1][0] // 60) + 1):
        xs = [b for t, _, b, _ in series if m * 60 <= t < (m + 1) * 60 and b]
        if xs:
            minutes.append(median(xs) / 1024)
    return {"checks": req1 - req0, "bytes": b1 - b0, "cpu": cpu,
            "self_cpu": ticks[2] / TCK if ticks else None,
            "pss_1m": first / 1024, "pss_max_after": after / 1024,
            "pss_max": max(b for _, _, b, _ in series) / 1024,
            "pss_last_min": sum(last_min) / len(last_min) / 1024 if last_min else 0,
            "notifio_pss_max": max(t for _, t, _, _ in series) / 1024,
            "processes": max(n for _, _, _, n in series),
            "minutes": minutes,
            "series": [(round(t), round(b / 1024)) for t, _, b, _ in series],
            "rc": os.waitstatus_to_exitcode(status)}


# --- the report -----------------------------------------------------------------------------

def report(args, rows, images, soaked):
    out = []
    n = args.pages
    if rows:
        out.append("### Same %d pages (~%d KB, cards built by a script %s after load), "
                   "%d rounds, tools alternating\n" % (n, args.page_bytes // 1000,
                                                       args.render_after, args.rounds))
        out.append("| round | tool | load | wall s (reading) | CPU s | CPU ms/check (tool + "
                   "browser) | wall ms/check (reading) | PSS MB tool / browser | requests | "
                   "bytes/check | read | rc |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            out.append("| %d | %s | %s | %.1f (%.1f) | %.2f | %.0f (%.0f + %.0f) | %.0f (%.0f) | "
                       "%.0f / %.0f | %d | %.0f | %s | %d |" % (
                           r["round"], r["tool"], r["load"], r["wall"], r["span"], r["cpu"],
                           1000 * r["cpu"] / n, 1000 * r["cpu_self"] / n,
                           1000 * r["cpu_browser"] / n, 1000 * r["wall"] / n,
                           1000 * r["span"] / n, r["pss_tool"], r["pss_browser"],
                           r["requests"], r["bytes"] / n, "%s/%d" % (r["ok"], n), r["rc"]))
        out.append("\nMedians over the rounds:\n")
        out.append("| tool | CPU ms/check | tool + browser | wall ms/check (reading) | peak PSS "
                   "MB tool / browser | KB/check |")
        out.append("|---|---|---|---|---|---|")
        med = {}
        for name in [t.name for t in [TOOLS[x] for x in args.tools.split(",") if x]]:
            mine = [r for r in rows if r["tool"] == name]
            m = {k: median([r[k] for r in mine]) for k in
                 ("cpu", "cpu_self", "cpu_browser", "wall", "span", "pss_tool", "pss_browser",
                  "bytes")}
            med[name] = m
            out.append("| %s | %.0f | %.0f + %.0f | %.0f (%.0f) | %.0f / %.0f | %.0f |" % (
                name, 1000 * m["cpu"] / n, 1000 * m["cpu_self"] / n,
                1000 * m["cpu_browser"] / n, 1000 * m["wall"] / n, 1000 * m["span"] / n,
                m["pss_tool"],
                m["pss_browser"], m["bytes"] / n / 1000))
        mine = med.get("notifio")
        if mine:
            out.append("")
            for peer, target in (("changedetection.io", "≤ 1/10"),
                                 ("playwright, one tab", "≤ 1.5×")):
                if peer in med:
                    out.append("- Notifio's CPU per check ÷ %s's: **%.3f** (target %s)" % (
                        peer, mine["cpu"] / med[peer]["cpu"], target))
    if images:
        out.append("\n### The 20-image page (Notifio, one `check` each)\n")
        out.append("| `[browser] block` | requests | bytes |")
        out.append("|---|---|---|")
        for label, req, sent, rc in images:
            out.append("| %s | %d | %d |" % (label, req, sent))
        if len(images) == 2 and images[1][2]:
            out.append("\nWith the default block: **%.1f%% fewer bytes** (target ≥ 80%%)" % (
                100 * (1 - images[0][2] / images[1][2])))
    if soaked:
        s = soaked
        out.append("\n### Soak: `notifio watch`, 100 searches over 10 browser sites, %d s, "
                   "interval %s\n" % (args.soak_seconds, args.soak_interval))
        growth = 100 * (s["pss_max_after"] / s["pss_1m"] - 1) if s["pss_1m"] else float("nan")
        out.append("- checks: %d; CPU %.1f s (notifio + browser) = **%.0f ms/check**" % (
            s["checks"], s["cpu"], 1000 * s["cpu"] / max(s["checks"], 1)))
        out.append("- browser tree PSS: %.0f MB at 1 min, max after it %.0f MB (**%+.1f%%**), "
                   "mean of the last minute %.0f MB, max %.0f MB (targets ≤ +10%%, < 600 MB); "
                   "up to %d browser processes; notifio itself ≤ %.0f MB PSS" % (
                       s["pss_1m"], s["pss_max_after"], growth, s["pss_last_min"], s["pss_max"],
                       s["processes"], s["notifio_pss_max"]))
        if len(s["minutes"]) >= 2:
            out.append("- median PSS of each minute: %s MB; the last minute's vs the second's: "
                       "**%+.1f%%**" % (" → ".join("%.0f" % x for x in s["minutes"]),
                                        100 * (s["minutes"][-1] / s["minutes"][1] - 1)))
        out.append("- PSS every 5 s (s: MB): " + ", ".join("%d: %d" % x for x in s["series"]))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", required=True)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--pages", type=int, default=50)
    ap.add_argument("--page-bytes", type=int, default=300_000)
    ap.add_argument("--render-after", default="100ms")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4,
                    help="changedetection.io's FETCH_WORKERS (Notifio's concurrency is 4)")
    ap.add_argument("--tools", default="notifio,changedetection.io,floor")
    ap.add_argument("--parts", default="pages,images,soak")
    ap.add_argument("--soak-seconds", type=int, default=300)
    ap.add_argument("--soak-interval", default="30s")
    ap.add_argument("--json", help="also write the raw figures here")
    args = ap.parse_args()
    parts = args.parts.split(",")
    become_subreaper()
    work = tempfile.mkdtemp(prefix="notifio-browser-bench-")
    log("work dir", work)
    rows = same_pages(args, work) if "pages" in parts else []
    images = image_page(args, work) if "images" in parts else []
    soaked = soak(args, work) if "soak" in parts else None
    print(report(args, rows, images, soaked))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": [{k: v for k, v in r.items() if k != "series"} for r in rows],
                       "images": images, "soak": soaked}, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
