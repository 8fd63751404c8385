#!/usr/bin/python3
"""make promcheck: the Prometheus rules and the Grafana board of deploy/
against Prometheus's own tools and a running kspecd.

    /usr/bin/python3 tests/promcheck.py BUILD               (the checks)
    /usr/bin/python3 tests/promcheck.py --self-test BUILD   (each check
        shown to catch a bug planted in a scratch copy of deploy/)

BUILD is the build folder holding kspecd and kspec.  The checks:

  rules    `promtool check rules` accepts deploy/prometheus/kspec-rules.yml
           and `promtool test rules` passes kspec-rules.test.yml.  Every
           alert has a case in the test file where it fires (exp_alerts
           not empty) and one where it stays silent (exp_alerts: []), and
           every recording rule's value is checked by a promql_expr_test.
  board    deploy/grafana/kspec.json parses; it has a Prometheus
           datasource variable, every panel uses it and has at least one
           target with an expression, and every expression (the
           variables' queries too) parses: each, with Grafana's variables
           replaced by values, is a rule of a throwaway rules file that
           `promtool check rules` reads.  Every heading of the built-in
           page (server/dashboard.html) is a panel's title (a parenthesis
           aside), but the one /metrics has no series for (NOT_ON_BOARD).
  names    Every metric name an expression of the rules or the board uses
           is one that a kspecd started here (with a remote tier
           configured, so that its series are served) serves on /metrics:
           a histogram's _bucket, _sum and _count, Prometheus's own `up`,
           and in the rules the rules' own records.

The rules file's format is read line by line (no YAML library in the
standard library): `- alert: NAME` or `- record: NAME` then `expr:` on one
line or as a block (`expr: |`, `expr: >-`); the count of rules read is
held to the count promtool reports, so a rule the reader missed fails.

Without promtool (Debian's prometheus package, deploy/deps.sh) it prints
why it skips and exits 0.  Prints one line per problem and exits 1 if
there is any.  Standard library only.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import plant  # tests/plant.py, beside this file

RULES = "deploy/prometheus/kspec-rules.yml"
RULE_TESTS = "deploy/prometheus/kspec-rules.test.yml"
BOARD = "deploy/grafana/kspec.json"
PAGE = "server/dashboard.html"

# Headings of the built-in page that the board cannot show, and why.
NOT_ON_BOARD = {
    # /api/stats counts gets per kernel; /metrics does not, kernel names
    # being one label value per kernel of the library times each client's
    # shapes.
    "Most requested kernels",
}

# Series Prometheus itself makes for every target.
PROMETHEUS_SERIES = {"up"}

# Grafana's variables and the values they stand for while parsing.
GRAFANA_VARS = {"__rate_interval": "5m", "__interval": "1m",
                "__range": "1h", "instance": ".*", "datasource": "x"}

# Words of PromQL that look like metric names.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
            "and", "or", "unless", "offset", "bool", "inf", "nan", "atan2"}


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def promtool(*args, cwd=None):
    p = subprocess.run(["promtool"] + list(args), cwd=cwd,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    return p.returncode, p.stdout


# ---- the rules file, line by line ----

def rules(text):
    """[(kind, name, expr)] of a rules file: kind "alert" or "record"."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"\s*- (alert|record):\s*(\S+)\s*$", lines[i])
        if not m:
            i += 1
            continue
        kind, name = m.groups()
        expr = None
        i += 1
        while i < len(lines) and not re.match(r"\s*- (alert|record):",
                                              lines[i]):
            e = re.match(r"(\s*)expr:\s*(.*)$", lines[i])
            if e and expr is None:
                indent, rest = len(e.group(1)), e.group(2).strip()
                if rest in ("|", ">", "|-", ">-"):
                    body = []
                    i += 1
                    while i < len(lines) and (not lines[i].strip() or
                            len(lines[i]) - len(lines[i].lstrip()) > indent):
                        body.append(lines[i].strip())
                        i += 1
                    expr = " ".join(body).strip()
                    continue
                expr = rest.strip("'\"") if rest[:1] in "'\"" else rest
            i += 1
        out.append((kind, name, expr or ""))
    return out


def rule_tests(text):
    """({alert: [firing?, ...]}, [expr of each promql_expr_test]) of a
    promtool test file."""
    cases, exprs = {}, []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"\s*alertname:\s*(\S+)\s*$", line)
        if m:
            for nxt in lines[i + 1:]:
                e = re.match(r"\s*exp_alerts:\s*(.*)$", nxt)
                if e:
                    cases.setdefault(m.group(1), []).append(
                        e.group(1).strip() != "[]")
                    break
        m = re.match(r"\s*- expr:\s*(.+)$", line)
        if m:
            exprs.append(m.group(1).strip("'\" "))
    return cases, exprs


# ---- PromQL ----

def metric_names(expr):
    """The metric names EXPR selects (a best effort that errs towards
    more names: label names and function names are left out)."""
    s = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)                 # matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)                # ranges, subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*"
               r"\([^)]*\)", " ", s)                 # label lists
    s = re.sub(r"\boffset\s+\S+", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(\s*\()?", s):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def substitute(expr):
    """EXPR with Grafana's $var, ${var} and [[var]] replaced."""
    def value(m):
        name = m.group(1) or m.group(2) or m.group(3)
        return GRAFANA_VARS.get(name.split(":")[0], "x")
    return re.sub(r"\$\{([\w:]+)\}|\$(\w+)|\[\[(\w+)\]\]", value, expr)


def rules_file(path, exprs):
    """Writes a rules file of one recording rule per expression."""
    with open(path, "w") as f:
        f.write("groups:\n  - name: board\n    rules:\n")
        for _, expr in exprs:
            f.write("      - record: board:expr\n        expr: %s\n"
                    % json.dumps(expr))


def parse_problems(exprs, where):
    """Runs promtool check rules on a throwaway file with one recording
    rule per expression of EXPRS ([(label, expr)]), all at once, then,
    if that fails, one at a time: a problem per label whose expression
    does not parse."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="kspec-promcheck-") as d:
        path = os.path.join(d, "rules.yml")
        rules_file(path, exprs)
        if promtool("check", "rules", path)[0] == 0:
            return []
        for label, expr in exprs:
            rules_file(path, [(label, expr)])
            rc, out = promtool("check", "rules", path)
            if rc != 0:
                msg = " ".join(l.strip() for l in out.splitlines()
                               if l.strip() and "Checking" not in l)
                problems.append("%s: %s: the expression does not parse: %s"
                                % (where, label, msg[:300]))
    return problems


# ---- what kspecd serves ----

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def served_names(build):
    """The metric names the kspecd of BUILD serves on /metrics, with a
    remote tier configured (nothing listens there: its series are served
    all the same)."""
    d = tempfile.mkdtemp(prefix="kspec-promcheck-")
    proc = None
    try:
        for sub in ("run", "store"):
            os.mkdir(os.path.join(d, sub))
        subprocess.run([os.path.join(build, "kspec"), "fleet-key",
                        "generate", os.path.join(d, "fleet")],
                       stdout=subprocess.DEVNULL, check=True)
        for attempt in range(5):
            port = free_port()
            proc = subprocess.Popen(
                [os.path.join(build, "kspecd"),
                 "--socket", os.path.join(d, "run", "kspecd.sock"),
                 "--store", os.path.join(d, "store", "kspec.db"),
                 "--workers", "1",
                 "--metrics-listen", "127.0.0.1:%d" % port,
                 "--remote", "unix:" + os.path.join(d, "redis.sock"),
                 "--fleet-key", os.path.join(d, "fleet.public")],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            text = None
            for _ in range(600):
                if proc.poll() is not None:
                    break
                try:
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/metrics" % port,
                            timeout=5) as r:
                        text = r.read().decode()
                    break
                except OSError:
                    time.sleep(0.1)
            if text is not None:
                break
            err = proc.stderr.read().decode() if proc.poll() is not None \
                else ""
            proc.kill()
            proc.wait()
            proc = None
        else:
            raise SystemExit("promcheck: kspecd did not serve /metrics "
                             "(5 ports tried): %s" % err.strip()[-300:])
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(d, ignore_errors=True)
    names = set()
    for m in re.finditer(r"(?m)^# TYPE (\S+) (\S+)$", text):
        name, kind = m.groups()
        names.add(name)
        if kind in ("histogram", "summary"):
            names |= {name + "_sum", name + "_count"}
        if kind == "histogram":
            names.add(name + "_bucket")
    names |= set(re.findall(r"(?m)^([a-zA-Z_:][\w:]*)[{ ]", text))
    if "kspec_remote_connected" not in names:
        raise SystemExit("promcheck: kspecd served no remote tier series")
    return names


# ---- the checks ----

def check_rules(root, served):
    problems = []
    text = read(root, RULES)
    found = rules(text)
    rc, out = promtool("check", "rules", os.path.join(root, RULES))
    if rc != 0:
        return ["%s: promtool check rules: %s" % (RULES, out.strip())]
    m = re.search(r"SUCCESS: (\d+) rules found", out)
    if not m or int(m.group(1)) != len(found):
        problems.append("%s: promtool found %s rules, this reader %d: "
                        "write each as `- alert:`/`- record:` and `expr:`"
                        % (RULES, m.group(1) if m else "no", len(found)))
    rc, out = promtool("test", "rules", os.path.basename(RULE_TESTS),
                       cwd=os.path.join(root, os.path.dirname(RULE_TESTS)))
    if rc != 0:
        problems.append("%s: promtool test rules failed:\n%s"
                        % (RULE_TESTS, out.strip()))
    cases, exprs = rule_tests(read(root, RULE_TESTS))
    records = {n for k, n, _ in found if k == "record"}
    for kind, name, expr in found:
        if kind == "alert":
            if True not in cases.get(name, []):
                problems.append("%s: alert %s has no case where it fires"
                                % (RULE_TESTS, name))
            if False not in cases.get(name, []):
                problems.append("%s: alert %s has no case where it stays "
                                "silent" % (RULE_TESTS, name))
        elif not any(name in metric_names(e) for e in exprs):
            problems.append("%s: no promql_expr_test checks the value of "
                            "record %s" % (RULE_TESTS, name))
        for n in sorted(metric_names(expr) - served - records -
                        PROMETHEUS_SERIES):
            problems.append("%s: %s %s names %s, which kspecd's /metrics "
                            "does not serve" % (RULES, kind, name, n))
    for name in sorted(set(cases) - {n for _, n, _ in found}):
        problems.append("%s: tests alert %s, which %s does not have"
                        % (RULE_TESTS, name, RULES))
    return problems


def page_titles(root):
    """The tiles' labels and the cards' headings of the built-in page."""
    html = read(root, PAGE)
    return re.findall(r'<div class="label">([^<]+)</div>', html) + \
        re.findall(r"<h2>([^<]+)</h2>", html)


def plain(title):
    return re.sub(r"\s*\([^)]*\)", "", title).strip().lower()


def check_board(root, served):
    try:
        board = json.loads(read(root, BOARD))
    except ValueError as e:
        return ["%s: not JSON: %s" % (BOARD, e)]
    problems, exprs = [], []
    if not isinstance(board.get("schemaVersion"), int) or \
            board["schemaVersion"] < 36:
        problems.append("%s: schemaVersion %r is not a current Grafana's "
                        "(36 or more)" % (BOARD, board.get("schemaVersion")))
    variables = board.get("templating", {}).get("list", [])
    ds = [v["name"] for v in variables if v.get("type") == "datasource"
          and v.get("query") == "prometheus"]
    if not ds:
        problems.append("%s: no Prometheus datasource variable" % BOARD)
    for v in variables:
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query":
            m = re.match(r"\s*label_values\((.*),\s*\w+\)\s*$", q or "")
            exprs.append(("variable %s" % v.get("name"),
                          m.group(1) if m else q or ""))
    titles, ids = [], set()
    for p in board.get("panels", []):
        if p.get("type") == "row":
            continue
        title = p.get("title", "")
        label = "panel %r" % title
        titles.append(title)
        if p.get("id") in ids:
            problems.append("%s: %s: id %r used twice" % (BOARD, label,
                                                         p.get("id")))
        ids.add(p.get("id"))
        uid = (p.get("datasource") or {}).get("uid", "")
        if not ds or uid not in ("${%s}" % ds[0], "$" + ds[0]):
            problems.append("%s: %s: its datasource is not the datasource "
                            "variable" % (BOARD, label))
        targets = [t for t in p.get("targets", [])
                   if (t.get("expr") or "").strip()]
        if not targets:
            problems.append("%s: %s has no target with an expression"
                            % (BOARD, label))
        for t in targets:
            exprs.append(("%s target %s" % (label, t.get("refId")),
                          t["expr"]))
    have = {plain(t) for t in titles}
    for t in page_titles(root):
        if t not in NOT_ON_BOARD and plain(t) not in have:
            problems.append("%s: no panel %r, which the built-in page (%s) "
                            "shows" % (BOARD, t, PAGE))
    exprs = [(label, substitute(e)) for label, e in exprs]
    problems += parse_problems(exprs, BOARD)
    for label, e in exprs:
        for n in sorted(metric_names(e) - served - PROMETHEUS_SERIES):
            problems.append("%s: %s names %s, which kspecd's /metrics does "
                            "not serve" % (BOARD, label, n))
    return problems


def check(root, served):
    return check_rules(root, served) + check_board(root, served)


# ---- the self-test ----

def edit(rel, old, new):
    """A plant: the first OLD in REL replaced by NEW (tests/plant.py)."""
    return plant.edit("promcheck", rel, old, new)


UNTESTED_ALERT = """
      - alert: KspecPlanted
        expr: kspec_connections > 1000
        labels:
          severity: warning
        annotations:
          summary: "planted"
"""

PLANTS = [
    ("an alert naming a metric kspecd does not serve",
     edit(RULES, "increase(kspec_store_corrupt_total[15m])",
          "increase(kspec_store_corrupted_total[15m])"),
     "names kspec_store_corrupted_total, which"),
    ("a board panel whose PromQL does not parse",
     edit(BOARD, "sum(kspec_compiles_queued{instance=~\\\"$instance\\\"})",
          "sum(kspec_compiles_queued{instance=~\\\"$instance\\\"}"),
     "does not parse"),
    ("an alert without a test case that fires",
     edit(RULES, "\n  - name: kspec.alerts\n    rules:\n",
          "\n  - name: kspec.alerts\n    rules:\n" + UNTESTED_ALERT),
     "alert KspecPlanted has no case where it fires"),
    ("an alert whose threshold no longer fires on its test's series",
     edit(RULES, "kspec:store_budget_used:ratio > 0.9",
          "kspec:store_budget_used:ratio > 0.99"),
     "promtool test rules failed"),
    ("a record whose value no test checks",
     edit(RULE_TESTS, "- expr: kspec:gets:rate5m",
          "- expr: kspec:requests:rate5m"),
     "checks the value of record kspec:gets:rate5m"),
    ("a board panel naming a metric kspecd does not serve",
     edit(BOARD, "kspec_workers_max", "kspec_workers_limit"),
     "names kspec_workers_limit, which"),
    ("a board panel without a target",
     edit(BOARD, '"targets": [', '"targets_": ['),
     "has no target with an expression"),
    ("a heading of the built-in page with no panel",
     edit(PAGE, "<h2>Workers</h2>", "<h2>Worker pool</h2>"),
     "no panel 'Worker pool'"),
]


def self_test(root, served):
    failed = False
    for what, plant, expect in PLANTS:
        with tempfile.TemporaryDirectory(prefix="kspec-promcheck-") as d:
            for rel in (RULES, RULE_TESTS, BOARD, PAGE):
                os.makedirs(os.path.join(d, os.path.dirname(rel)),
                            exist_ok=True)
                shutil.copy(os.path.join(root, rel), os.path.join(d, rel))
            plant(d)
            problems = check(d, served)
        if not any(expect in p for p in problems):
            print("promcheck --self-test: not caught: %s (expected %r in "
                  "%s)" % (what, expect, problems))
            failed = True
    if not failed:
        print("promcheck --self-test: %d planted bugs caught" % len(PLANTS))
    return 1 if failed else 0


def main(argv):
    args = [a for a in argv[1:] if a != "--self-test"]
    if len(args) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not shutil.which("promtool"):
        print("promcheck: SKIPPED: promtool is not installed (Debian's "
              "prometheus package; deploy/deps.sh installs it)")
        return 0
    served = served_names(os.path.abspath(args[0]))
    if "--self-test" in argv:
        return self_test(root, served)
    problems = check(root, served)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("promcheck: %s (%d rules, their tests) and %s checked against "
          "promtool and kspecd's /metrics" % (RULES, len(rules(read(
              root, RULES))), BOARD))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
