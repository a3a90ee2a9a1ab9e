"""Notifio against urlwatch and changedetection.io on the same 200 fake pages (issue 9).

Called by bench/peers.sh, which builds the release binaries and the throwaway venv. Each pass
is one process run to completion (cold: empty state; warm: nothing changed; changed: one new
listing on every page), timed with wait4's rusage: wall, CPU (user+sys) of the process tree,
peak RSS. Prints a Markdown report on stdout, progress on stderr.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import NOTIFIO, Portal, free_port, log, notifio_config, timed  # noqa: E402

WORKERS = 10  # urlwatch's fixed thread pool; Notifio and changedetection.io get the same


class Tool:
    name = "?"

    def __init__(self, work, urls, venv):
        self.work = work
        self.urls = urls
        self.venv = venv
        os.makedirs(work, exist_ok=True)

    def summary(self, out):
        return ""


class Notifio(Tool):
    name = "notifio"

    def __init__(self, work, urls, venv):
        super().__init__(work, urls, venv)
        self.cfg = os.path.join(work, "notifio.toml")
        # One search per site: the per-site spacing (2 s) never binds within a pass.
        notifio_config(self.cfg, os.path.join(work, "state"), urls, concurrency=WORKERS)

    def run(self, kind):
        out = os.path.join(self.work, "out-%s.jsonl" % kind)
        with open(out, "w") as f:
            r = timed([NOTIFIO, "check", "--json", "--config", self.cfg], stdout=f)
        lines = [json.loads(x) for x in open(out) if x.strip()]
        r["ok"] = sum(1 for x in lines if x.get("outcome") == "ok")
        r["changed"] = sum(1 for x in lines if x.get("new"))
        return r


class Urlwatch(Tool):
    name = "urlwatch"

    def __init__(self, work, urls, venv):
        super().__init__(work, urls, venv)
        self.urls_file = os.path.join(work, "urls.yaml")
        with open(self.urls_file, "w") as f:
            f.write("\n---\n".join("name: s%d\nurl: \"%s\"" % (i + 1, u)
                                  for i, u in enumerate(urls)) + "\n")
        self.config = os.path.join(work, "urlwatch.yaml")
        with open(self.config, "w") as f:
            f.write("report:\n  stdout:\n    enabled: true\n    color: false\n"
                    "  email:\n    enabled: false\n")
        self.env = dict(os.environ, HOME=work, XDG_CONFIG_HOME=work, XDG_CACHE_HOME=work)

    def run(self, kind):
        out = os.path.join(self.work, "out-%s.txt" % kind)
        with open(out, "w") as f:
            r = timed([os.path.join(self.venv, "bin", "urlwatch"), "--urls", self.urls_file,
                       "--config", self.config, "--cache", os.path.join(self.work, "cache.db")],
                      env=self.env, stdout=f)
        text = open(out, errors="replace").read()
        r["changed"] = len(re.findall(r"^(?:CHANGED|NEW): ", text, re.M))
        r["errors"] = len(re.findall(r"^ERROR: ", text, re.M))
        return r


class Changedetection(Tool):
    name = "changedetection.io"

    def __init__(self, work, urls, venv):
        super().__init__(work, urls, venv)
        self.datastore = os.path.join(work, "datastore")
        self.env = dict(os.environ, HOME=work, ALLOW_IANA_RESTRICTED_ADDRESSES="true",
                        FETCH_WORKERS=str(WORKERS), LOGGER_LEVEL="WARNING")
        self.first = True

    def run(self, kind):
        cmd = [os.path.join(self.venv, "bin", "changedetection.py"), "-d", self.datastore,
               "-h", "127.0.0.1", "-p", str(free_port()), "-b"]
        if self.first:
            cmd.append("-C")
            for u in self.urls:
                cmd += ["-u", u]
            self.first = False
        else:
            cmd += ["-r", "all"]
        r = timed(cmd, env=self.env, cwd=self.work, timeout=900)
        r["changed"] = "?"
        return r


TOOLS = {"notifio": Notifio, "urlwatch": Urlwatch, "changedetection.io": Changedetection}


def count_requests(log_path, windows):
    """Requests the portal logged inside each (label, t_start, t_end) window (epoch ms)."""
    counts = {w[0]: [0, 0] for w in windows}  # [all, conditional]
    try:
        lines = open(log_path).read().splitlines()
    except OSError:
        return counts
    for line in lines:
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        at = int(parts[0])
        for label, a, b in windows:
            if a <= at <= b:
                counts[label][0] += 1
                if parts[4] != "-":
                    counts[label][1] += 1
    return counts


def run_portal_phase(args, tools, validators, work):
    """One portal; for each tool: cold, warm[, changed]. Returns {(tool, pass): result}."""
    extra = ["--page-bytes", str(args.page_bytes)]
    if not validators:
        extra.append("--no-validators")
    tag = "etag" if validators else "noetag"
    log_path = os.path.join(work, "portal-%s.log" % tag)
    portal = Portal(args.pages, 1, extra, log_path=log_path)
    results, windows = {}, []
    try:
        urls = portal.all_urls()
        for name in tools:
            tool = TOOLS[name](os.path.join(work, tag, name), urls, args.venv)
            passes = ["cold", "warm", "changed"] if validators else ["cold", "warm (no ETag)"]
            for p in passes:
                if p == "changed":
                    portal.add_everywhere()
                log("%-18s %-16s ..." % (name, p))
                t0 = int(time.time() * 1000)
                r = tool.run(p)
                windows.append(("%s|%s" % (name, p), t0, int(time.time() * 1000)))
                log("%-18s %-16s wall %.1fs cpu %.2fs rss %.0fMB rc %s changed %s" %
                    (name, p, r["wall"], r["cpu"], r["rss_mb"], r["rc"], r.get("changed")))
                if r["rc"] != 0:
                    log("  stderr: " + r["stderr"].strip().replace("\n", "\n  "))
                results[(name, p)] = r
    finally:
        portal.stop()
    counts = count_requests(log_path, windows)
    for key, r in results.items():
        r["requests"], r["conditional"] = counts.get("%s|%s" % key, [0, 0])
    return results


def idle_cpu(args, work, name):
    """CPU of a peer doing nothing (its start-up): urlwatch over an empty job list."""
    if name != "urlwatch":
        return None
    t = Urlwatch(os.path.join(work, "idle-urlwatch"), [], args.venv)
    open(t.urls_file, "w").close()
    return timed([os.path.join(args.venv, "bin", "urlwatch"), "--urls", t.urls_file,
                  "--config", t.config, "--cache", os.path.join(t.work, "cache.db")],
                 env=t.env)["cpu"]


def report(args, results, idle):
    n = args.pages
    out = []
    out.append("pages: %d × ~%d KB, one search per site, %d workers each\n" %
               (n, args.page_bytes // 1000, WORKERS))
    out.append("| tool | pass | wall s | CPU s | CPU ms/check | peak RSS MB | requests "
               "(conditional) | changed seen | rc |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for (name, p), r in results.items():
        out.append("| %s | %s | %.2f | %.2f | %.1f | %.0f | %d (%d) | %s | %s |" % (
            name, p, r["wall"], r["cpu"], 1000 * r["cpu"] / n, r["rss_mb"], r["requests"],
            r["conditional"], r.get("changed"), r["rc"]))
    for name, cpu in idle.items():
        if cpu is not None:
            out.append("\n%s start-up alone (empty job list): %.2f s CPU" % (name, cpu))
    out.append("\n### Ratios (better peer ÷ Notifio, same pass)\n")
    out.append("| pass | better peer (CPU) | CPU ratio | peak RSS ratio (vs lower-RSS peer) | "
               "wall ratio |")
    out.append("|---|---|---|---|---|")
    passes = []
    for (_, p) in results:
        if p not in passes:
            passes.append(p)
    for p in passes:
        mine = results.get(("notifio", p))
        peers = [(k[0], r) for k, r in results.items()
                 if k[1] == p and k[0] != "notifio" and r["rc"] == 0]
        if not mine or not peers:
            continue
        best = min(peers, key=lambda x: x[1]["cpu"])
        low_rss = min(r["rss_mb"] for _, r in peers)
        low_wall = min(r["wall"] for _, r in peers)
        out.append("| %s | %s | %.1f× | %.1f× | %.1f× |" % (
            p, best[0], best[1]["cpu"] / max(mine["cpu"], 1e-3), low_rss / mine["rss_mb"],
            low_wall / mine["wall"]))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", required=True)
    ap.add_argument("--pages", type=int, default=200)
    ap.add_argument("--page-bytes", type=int, default=300_000)
    ap.add_argument("--tools", default="notifio,urlwatch,changedetection.io")
    ap.add_argument("--work", default=None)
    args = ap.parse_args()
    tools = args.tools.split(",")
    work = args.work or tempfile.mkdtemp(prefix="notifio-peers-")
    log("work dir", work)
    results = {}
    results.update(run_portal_phase(args, tools, True, work))
    results.update(run_portal_phase(args, tools, False, work))
    idle = {t: idle_cpu(args, work, t) for t in tools}
    print(report(args, results, idle))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
