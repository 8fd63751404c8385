#!/usr/bin/python3
"""make docscheck: what docs/ says of the code's tables is what the code has.

    /usr/bin/python3 tests/docscheck.py BUILD               (the checks)
    /usr/bin/python3 tests/docscheck.py --self-test BUILD   (each check
        shown to catch a drift planted in a scratch copy of the tree)

BUILD is the build folder holding kspecd and kspec.  The checks, each
against the code, never against a list written here:

  errors   Every code of KS_ERRNO_MAP (base/base.h) has a row in
           docs/protocol.md's "Error codes" table with its value, a
           meaning that says more than the code's own message (the
           condition that produces it) and who produces it; every row
           is a code of the map; every E_ code any doc or the README
           names is one (KS_E_X and KSPEC_E_X too; E_X and E_CODE are
           the docs' placeholders).  The E_UNKNOWN_OP row lists exactly
           the ops of proto/proto.c, and the "Ops" section has a heading
           for each of them and for nothing else.
  cli      Every option that `kspec --help` and `kspec CMD --help` (for
           each command it lists) print, in the usage lines or the option
           list, is in docs/cli.md: a global one above "## Commands",
           another in the section of CMD.  Every option that `kspecd
           --help` prints, and every long option of kspecd's parser
           (server/main.c), is in docs/cli.md's "## kspecd" section, and
           the parser's are all in --help.  The reverse: an invocation
           written in a doc or the README (`kspec CMD ...`, `kspecd ...`
           in code) names only options of that program and command, and
           each row of the kspecd option table is an option of kspecd.
  store    docs/store.md's "Schema version N:" is KS_STORE_SCHEMA_VERSION
           (store/store.h), and the page names every version from v1 to
           it and none above.
  python   Every "Python 3.N+" of docs/python.md is the minimum of
           client/python/pyproject.toml's requires-python; the system
           socket of the Python client (SYSTEM_SOCKET) is the C one
           (KS_PROTO_SYSTEM_SOCKET) and docs/python.md and docs/cli.md
           name it.
  paths    A path to an installed kspec or kspecd in a doc or the README
           is under the Makefile's default PREFIX.
  reply    The get reply's fields of proto/reply.def (past the envelope's
           ok and id, which every reply has) are exactly the rows of
           docs/protocol.md's get "Reply fields" table and the fields
           the Python client's kspec.Artifact reads (Artifact.FIELDS).

Prints one line per problem and exits 1 if there is any.  Standard
library only.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import plant  # tests/plant.py, beside this file

# The docs' placeholders for "some error code".
PLACEHOLDERS = {"E_X", "E_CODE"}

def doc_files(root):
    """The Markdown files held to the code: every page of docs/ and the
    README."""
    names = sorted(n for n in os.listdir(os.path.join(root, "docs"))
                   if n.endswith(".md"))
    return ["docs/" + n for n in names] + ["README.md"]


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def section(text, heading):
    """The text under the line HEADING (exactly) up to the next heading of
    the same or a higher level; None when there is no such line."""
    lines = text.split("\n")
    level = len(heading) - len(heading.lstrip("#"))
    try:
        start = lines.index(heading)
    except ValueError:
        return None
    out = []
    for line in lines[start + 1:]:
        m = re.match(r"(#+) ", line)
        if m and len(m.group(1)) <= level:
            break
        out.append(line)
    return "\n".join(out)


def subsections(text, level):
    """[(heading text, body)] of the headings of LEVEL (2: "## ") in TEXT."""
    out = []
    mark = "#" * level + " "
    for line in text.split("\n"):
        if line.startswith(mark):
            out.append([line[len(mark):].strip(), []])
        elif re.match(r"#{1,%d} " % level, line):
            out.append([None, []])
        elif out:
            out[-1][1].append(line)
    return [(h, "\n".join(b)) for h, b in out if h is not None]


# ---- facts from the code ----

def code_errors(root):
    """[(wire name, value, message)] of KS_ERRNO_MAP, in its order."""
    text = read(root, "base/base.h")
    m = re.search(r"#define KS_ERRNO_MAP\(X\)(.*?)\n\n", text, re.S)
    if not m:
        raise SystemExit("docscheck: no KS_ERRNO_MAP in base/base.h")
    return [("E_" + n, int(v), msg) for n, v, msg in re.findall(
        r'X\(\s*(\w+)\s*,\s*(-?\d+)\s*,\s*"([^"]*)"\s*\)', m.group(1))]


def code_ops(root):
    """The op names of proto/proto.c's op_names[], in its order."""
    text = read(root, "proto/proto.c")
    m = re.search(r"op_names\[[^]]*\]\s*=\s*\{(.*?)\};", text, re.S)
    if not m:
        raise SystemExit("docscheck: no op_names[] in proto/proto.c")
    return re.findall(r'\[KS_OP_\w+\]\s*=\s*"([^"]+)"', m.group(1))


def define(root, rel, name):
    m = re.search(r"^#define %s\s+(\S+)" % name, read(root, rel), re.M)
    if not m:
        raise SystemExit("docscheck: no %s in %s" % (name, rel))
    return m.group(1).strip('"')


def kspecd_parser_options(root):
    """The long options of kspecd's getopt table (server/main.c)."""
    text = read(root, "server/main.c")
    m = re.search(r"struct option opts\[\]\s*=\s*\{(.*?)\};", text, re.S)
    if not m:
        raise SystemExit("docscheck: no option table in server/main.c")
    return ["--" + n for n in re.findall(r'\{\s*"([\w-]+)"', m.group(1))]


def python_minimum(root):
    text = read(root, "client/python/pyproject.toml")
    m = re.search(r'^requires-python\s*=\s*">=\s*(\d+\.\d+)"', text, re.M)
    if not m:
        raise SystemExit("docscheck: no requires-python \">=X.Y\" in "
                         "client/python/pyproject.toml")
    return m.group(1)


def default_prefix(root):
    m = re.search(r"^PREFIX\s*\?=\s*(\S+)", read(root, "Makefile"), re.M)
    if not m:
        raise SystemExit("docscheck: no PREFIX ?= in the Makefile")
    return m.group(1)


# ---- options in help texts and in docs ----

OPTION = r"(?<![\w\-.$/])(--?[A-Za-z][\w-]*)"


def options_in(text):
    return set(re.findall(OPTION, text))


def help_options(text):
    """The options a --help text declares: those of its usage lines (up to
    the first blank line) and the first column of its option list (lines
    indented by exactly two spaces that begin with a dash).  Prose that
    mentions another program's option declares nothing."""
    lines = text.split("\n")
    out = set()
    i = 0
    while i < len(lines) and lines[i].strip():
        out |= options_in(lines[i])
        i += 1
    for line in lines[i:]:
        m = re.match(r"  (-[A-Za-z])?(?:, )?(--[a-z][\w-]*)?", line)
        if m and not line.startswith("   "):
            out |= {o for o in m.groups() if o}
    return out


def run_help(build, prog, *args):
    p = subprocess.run([os.path.join(build, prog)] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=30)
    if p.returncode != 0:
        raise SystemExit("docscheck: %s %s exited %d:\n%s"
                         % (prog, " ".join(args), p.returncode, p.stdout))
    return p.stdout


def helps(build):
    """{"kspecd": options, "kspec": global options, CMD: options} from the
    programs' --help."""
    top = run_help(build, "kspec", "--help")
    m = re.search(r"^commands:\n(.*?)\n\n", top, re.S | re.M)
    if not m:
        raise SystemExit("docscheck: kspec --help lists no commands")
    cmds = [line.split()[0] for line in m.group(1).split("\n")
            if line.strip()]
    out = {"kspecd": help_options(run_help(build, "kspecd", "--help")),
           "kspec": help_options(top.replace(m.group(0), "\n"))}
    for c in cmds:
        # help's usage is kspec --help itself.
        out[c] = set() if c == "help" else help_options(
            run_help(build, "kspec", c, "--help"))
    return out


def code_spans(text):
    """The code of TEXT: each fenced block, and each inline span, without
    the messages of the programs in them."""
    spans = []

    def fence(m):
        spans.append(m.group(1))
        return "\n"
    rest = re.sub(r"^```[^\n]*\n(.*?)^```", fence, text, flags=re.S | re.M)
    # What begins "kspec: " is what a program printed, not a command line:
    # an inline span whole (it may go on over a line break), a line of a
    # block.
    spans = [re.sub(r"(?m)^\s*kspecd?: .*$", "", s) for s in spans]
    return spans + [s for s in re.findall(r"`([^`]+)`", rest)
                    if not re.match(r"\s*kspecd?: ", s)]


def invocations(span, prog):
    """The command lines of PROG in SPAN: from "PROG " up to the end of its
    line (continuation lines, indented, belong to it), a shell separator
    (" | ", "&", ";", a comment) or the next invocation."""
    out = []
    for m in re.finditer(r"(?<![\w/.-])(?:/[\w/]+/)?%s(?=[ \n]|$)"
                         % re.escape(prog), span):
        rest = span[m.end():]
        cut = re.search(r"\n(?![ \t])| \| | ?&|;| #|(?<![\w-])(?:/[\w/]+/)?"
                        r"kspecd?(?= )", rest)
        out.append(rest[:cut.start()] if cut else rest)
    return out


# ---- the checks ----

def check_errors(root):
    problems = []
    errors = code_errors(root)
    known = {n: (v, msg) for n, v, msg in errors}
    proto = read(root, "docs/protocol.md")
    table = section(proto, "## Error codes")
    if table is None:
        return ["docs/protocol.md: no \"## Error codes\" section"]
    rows = {}
    for line in table.split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not re.fullmatch(r"`E_\w+`", cells[0]):
            continue
        code = cells[0].strip("`")
        if code in rows:
            problems.append("docs/protocol.md: %s has two rows" % code)
        rows[code] = cells
    norm = lambda s: re.sub(r"[^a-z0-9]+", " ", s.lower()).strip()
    for name, value, msg in errors:
        row = rows.get(name)
        if row is None:
            problems.append("docs/protocol.md: %s (base/base.h) has no row "
                            "in the error table" % name)
            continue
        if row[1] != str(value):
            problems.append("docs/protocol.md: %s is %s in the table, %d "
                            "in base/base.h" % (name, row[1], value))
        if norm(row[2]) in ("", norm(msg)):
            problems.append("docs/protocol.md: %s's meaning only repeats "
                            "its message (\"%s\"): say what produces it"
                            % (name, msg))
        if not row[3]:
            problems.append("docs/protocol.md: %s: no producer (where)"
                            % name)
    for name in rows:
        if name not in known:
            problems.append("docs/protocol.md: the error table's %s is not "
                            "in base/base.h" % name)
    for rel in doc_files(root):
        text = read(root, rel)
        for n in sorted(set(re.findall(
                r"(?<![A-Za-z0-9_])(?:KS_|KSPEC_)?(E_[A-Z][A-Z0-9_]*)",
                text))):
            n = n.rstrip("_")
            if n not in known and n not in PLACEHOLDERS:
                problems.append("%s: names %s, which base/base.h does not "
                                "have" % (rel, n))
    # The op list of E_UNKNOWN_OP, and the ops' headings.
    ops = code_ops(root)
    row = rows.get("E_UNKNOWN_OP")
    if row is not None:
        m = re.search(r"one of (.*)", row[2])
        listed = [o.strip(" `") for o in m.group(1).split(",")] if m else []
        for o in ops:
            if o not in listed:
                problems.append("docs/protocol.md: E_UNKNOWN_OP's list of "
                                "ops lacks %s (proto/proto.c)" % o)
        for o in listed:
            if o not in ops:
                problems.append("docs/protocol.md: E_UNKNOWN_OP lists %s, "
                                "which is no op of proto/proto.c" % o)
    body = section(proto, "## Ops") or ""
    headed = [o.strip(" `") for h, _ in subsections(body, 3)
              for o in h.split(",")]
    for o in ops:
        if o not in headed:
            problems.append("docs/protocol.md: no \"### %s\" under Ops" % o)
    for o in headed:
        if o not in ops:
            problems.append("docs/protocol.md: \"### %s\" under Ops is no "
                            "op of proto/proto.c" % o)
    return problems


def has_option(text, opt):
    return re.search(r"(?<![\w\-.$/])%s(?![\w-])" % re.escape(opt),
                     text) is not None


def check_cli(root, opts):
    problems = []
    cli = read(root, "docs/cli.md")
    top = cli.split("\n## Commands\n")[0]
    commands = section(cli, "## Commands") or ""
    daemon = section(cli, "## kspecd")
    if daemon is None:
        return ["docs/cli.md: no \"## kspecd\" section"]
    for o in sorted(opts["kspec"]):
        if not has_option(top, o):
            problems.append("docs/cli.md: kspec's %s (kspec --help) is not "
                            "above \"## Commands\"" % o)
    cmds = [c for c in opts if c not in ("kspec", "kspecd")]
    sections = {}
    for heading, body in subsections(commands, 3):
        for word in re.findall(r"[\w-]+", heading):
            if word in cmds:
                sections[word] = body
    for c in cmds:
        if c == "help":
            continue
        if c not in sections:
            problems.append("docs/cli.md: no \"### %s\" section" % c)
            continue
        for o in sorted(opts[c] - opts["kspec"] - {"-h", "--help"}):
            if not has_option(sections[c], o):
                problems.append("docs/cli.md: %s of kspec %s (its --help) "
                                "is not in its section" % (o, c))
    parser = kspecd_parser_options(root)
    for o in sorted(opts["kspecd"] | set(parser)):
        if not has_option(daemon, o):
            problems.append("docs/cli.md: kspecd's %s is not in the "
                            "\"## kspecd\" section" % o)
    for o in parser:
        if o not in opts["kspecd"]:
            problems.append("kspecd --help does not print %s, which "
                            "server/main.c's parser takes" % o)
    # The reverse: every kspecd option the section's table documents.
    for line in daemon.split("\n"):
        m = re.match(r"\|\s*`(--?[A-Za-z][\w-]*)", line)
        if m and m.group(1) not in opts["kspecd"]:
            problems.append("docs/cli.md: the kspecd table's %s is not an "
                            "option of kspecd --help" % m.group(1))
    # The reverse: every invocation written in the docs.
    for rel in doc_files(root):
        for span in code_spans(read(root, rel)):
            for inv in invocations(span, "kspecd"):
                for o in sorted(options_in(inv) - opts["kspecd"]):
                    problems.append("%s: `kspecd%s`: kspecd has no %s"
                                    % (rel, inv.split("\n")[0], o))
            for inv in invocations(span, "kspec"):
                words = re.sub(r"\[--socket[ =][^]]*\]|--socket[ =]\S+",
                               "", inv).split()
                cmd = words[0] if words else ""
                if cmd.startswith("-"):
                    allowed = opts["kspec"]
                elif cmd in opts and cmd not in ("kspec", "kspecd"):
                    allowed = opts[cmd] | opts["kspec"] | {"-h", "--help"}
                else:
                    continue        # a placeholder: kspec COMMAND --help
                for o in sorted(options_in(inv) - allowed):
                    problems.append("%s: `kspec%s`: kspec %s has no %s"
                                    % (rel, inv.split("\n")[0], cmd, o))
    return problems


def check_store(root):
    problems = []
    version = int(define(root, "store/store.h", "KS_STORE_SCHEMA_VERSION"))
    text = read(root, "docs/store.md")
    stated = re.findall(r"Schema version (\d+):", text)
    if not stated:
        problems.append("docs/store.md: no \"Schema version N:\" before "
                        "the schema")
    for s in stated:
        if int(s) != version:
            problems.append("docs/store.md: \"Schema version %s\", but "
                            "store/store.h's KS_STORE_SCHEMA_VERSION is %d"
                            % (s, version))
    named = {int(v) for v in re.findall(r"(?<![\w.])v(\d+)\b", text)}
    for v in range(1, version + 1):
        if v not in named:
            problems.append("docs/store.md: schema v%d (of %d) is never "
                            "named" % (v, version))
    for v in sorted(named):
        if v > version:
            problems.append("docs/store.md: names schema v%d, but the code "
                            "is at %d" % (v, version))
    return problems


def check_python(root):
    problems = []
    minimum = python_minimum(root)
    text = read(root, "docs/python.md")
    stated = re.findall(r"Python (\d+\.\d+)\+", text)
    if not stated:
        problems.append("docs/python.md: no \"Python 3.N+\"")
    for s in stated:
        if s != minimum:
            problems.append("docs/python.md: says Python %s+, but "
                            "pyproject.toml requires >=%s" % (s, minimum))
    c_sock = define(root, "proto/proto.h", "KS_PROTO_SYSTEM_SOCKET")
    m = re.search(r'^SYSTEM_SOCKET\s*=\s*"([^"]+)"',
                  read(root, "client/python/kspec/client.py"), re.M)
    if not m:
        problems.append("client/python/kspec/client.py: no SYSTEM_SOCKET")
    elif m.group(1) != c_sock:
        problems.append("the Python client's SYSTEM_SOCKET %s is not the C "
                        "client's %s" % (m.group(1), c_sock))
    for rel in ("docs/python.md", "docs/cli.md"):
        if c_sock not in read(root, rel):
            problems.append("%s: the default socket's last step, %s, is "
                            "not named" % (rel, c_sock))
    return problems


def check_paths(root):
    problems = []
    bindir = default_prefix(root) + "/bin"
    for rel in doc_files(root):
        for m in re.finditer(r"(?<![\w$])(/[\w./-]*)/(kspecd?)(?![\w.-])",
                             read(root, rel)):
            if m.group(1).endswith("/bin") and m.group(1) != bindir:
                problems.append("%s: %s/%s, but make install puts it in %s "
                                "(the Makefile's PREFIX)"
                                % (rel, m.group(1), m.group(2), bindir))
    return problems


def reply_fields(root):
    """The get reply's fields of proto/reply.def, in order."""
    return re.findall(r"^KS_GET_FIELD\((\w+),", read(root, "proto/reply.def"),
                      re.M)


def check_reply(root):
    problems = []
    fields = [f for f in reply_fields(root) if f not in ("ok", "id")]
    if not fields:
        return ["proto/reply.def: no KS_GET_FIELD"]
    get = section(read(root, "docs/protocol.md"), "### get") or ""
    at = get.find("Reply fields")
    rows = []
    for line in get[at:].split("\n")[1:] if at >= 0 else []:
        if line.startswith("|"):
            rows.append(line.split("|")[1])
        elif rows:
            break
    named = set()
    for cell in rows[2:]:
        named.update(re.findall(r"`(\w+)`", cell))
    if not rows:
        problems.append("docs/protocol.md: the get section has no "
                        "\"Reply fields\" table")
    for f in fields:
        if rows and f not in named:
            problems.append("docs/protocol.md: the get reply's field %s "
                            "(proto/reply.def) has no row" % f)
    for n in sorted(named - set(fields)):
        problems.append("docs/protocol.md: the get reply table names %s, "
                        "which proto/reply.def does not have" % n)
    m = re.search(r"^    FIELDS = \{(.*?)\}", read(
        root, "client/python/kspec/client.py"), re.M | re.S)
    if not m:
        return problems + ["client/python/kspec/client.py: no "
                           "Artifact.FIELDS"]
    py = re.findall(r'"\w+": "(\w+)"', m.group(1))
    for f in fields:
        if f not in py:
            problems.append("the Python client's Artifact does not read "
                            "the get reply's field %s" % f)
    for n in sorted(set(py) - set(fields)):
        problems.append("the Python client's Artifact reads %s, which "
                        "proto/reply.def does not have" % n)
    return problems


def check(root, opts):
    """Every problem of the tree at ROOT, with OPTS the options of its
    programs (helps())."""
    return (check_errors(root) + check_cli(root, opts) + check_store(root)
            + check_python(root) + check_paths(root) + check_reply(root))


# ---- the self-test ----

# What the checks read, copied into the scratch tree.
INPUTS = ["docs", "README.md", "Makefile", "base/base.h", "proto/proto.c",
          "proto/proto.h", "proto/reply.def", "store/store.h",
          "server/main.c",
          "client/python/pyproject.toml", "client/python/kspec/client.py"]


def edit(rel, old, new):
    """A plant: the first OLD in REL replaced by NEW (tests/plant.py)."""
    return plant.edit("docscheck", rel, old, new)


def bump_schema(scratch):
    """A plant: the next schema version in store/store.h."""
    v = int(define(scratch, "store/store.h", "KS_STORE_SCHEMA_VERSION"))
    edit("store/store.h", "KS_STORE_SCHEMA_VERSION %d" % v,
         "KS_STORE_SCHEMA_VERSION %d" % (v + 1))(scratch)


def extra_help(prog, args, line):
    """A plant: PROG ARGS... --help prints LINE as one more option.  The
    scratch build's programs are scripts around the real ones."""
    def plant(scratch):
        sbuild = os.path.join(scratch, "build")
        os.makedirs(sbuild, exist_ok=True)
        for p in ("kspecd", "kspec"):
            path = os.path.join(sbuild, p)
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write('#!/bin/sh\n"%s" "$@" || exit\n'
                            % os.path.join(plant.build, p))
                os.chmod(path, 0o755)
        with open(os.path.join(sbuild, prog), "a") as f:
            f.write('if [ "$*" = "%s" ]; then echo "%s"; fi\n'
                    % (" ".join(args), line))
    plant.build = None          # set by self_test
    plant.runs = True           # the programs' help must be read again
    return plant


PLANTS = [
    ("a code of base/base.h without a row",
     edit("base/base.h", '"the kernel failed its known-answer canary")',
          '"the kernel failed its known-answer canary")                 \\\n'
          '\tX(PLANTED,      -99, "planted")'), "E_PLANTED"),
    ("a row removed from the error table",
     edit("docs/protocol.md", "| `E_CANCELLED` |", "| `E_CANCELLED_` |"),
     "E_CANCELLED"),
    ("a doc naming a code that does not exist",
     edit("docs/cli.md", "E_DENIED", "E_REFUSED"), "E_REFUSED"),
    ("a row whose value is not the code's",
     edit("docs/protocol.md", "| `E_BUSY` | -25 |", "| `E_BUSY` | -52 |"),
     "E_BUSY"),
    ("a meaning that only repeats the message",
     edit("docs/protocol.md", "| `E_PROTO` | -23 | a reply that breaks "
          "this protocol |", "| `E_PROTO` | -23 | protocol violation |"),
     "E_PROTO"),
    ("an op of proto/proto.c missing from E_UNKNOWN_OP and Ops",
     edit("proto/proto.c", '[KS_OP_CANARY] = "canary",',
          '[KS_OP_CANARY] = "canary", [KS_OP_COUNT_] = "planted",'),
     "planted"),
    ("an option of kspecd --help not in docs/cli.md",
     extra_help("kspecd", ["--help"], "  --planted-option N  planted"),
     "--planted-option"),
    ("an option of kspec get --help not in its section",
     extra_help("kspec", ["get", "--help"], "  --planted F      planted"),
     "--planted"),
    ("a global option of kspec --help not in docs/cli.md",
     extra_help("kspec", ["--help"], "  -P, --plant      planted"), "-P"),
    ("an option of kspecd's parser that --help does not print",
     edit("server/main.c", '{ "socket", required_argument, 0, \'s\' },',
          '{ "socket", required_argument, 0, \'s\' }, '
          '{ "planted", no_argument, 0, \'p\' },'), "--planted"),
    ("a kspecd table row for an option kspecd does not have",
     edit("docs/cli.md", "| `--hot-bytes N` |", "| `--cold-bytes N` |"),
     "--cold-bytes"),
    ("a doc invoking kspec with an option its command does not have",
     edit("docs/cli.md", "`kspec ls [--kernel K]", "`kspec ls [--kernal K]"),
     "--kernal"),
    ("the store's schema version moved on", bump_schema,
     "KS_STORE_SCHEMA_VERSION"),
    ("Python's minimum raised in pyproject.toml",
     edit("client/python/pyproject.toml", 'requires-python = ">=3.',
          'requires-python = ">=4.'), "Python"),
    ("the system socket dropped from docs/python.md",
     edit("docs/python.md", "/run/kspec/kspecd.sock", "/run/kspecd.sock"),
     "/run/kspec/kspecd.sock"),
    ("a field added to proto/reply.def alone",
     edit("proto/reply.def", "KS_GET_FIELD(compiler,",
          "KS_GET_FIELD(planted, STR, ALWAYS, META)\n"
          "KS_GET_FIELD(compiler,"),
     "planted"),
    ("a get reply row for a field the reply does not have",
     edit("docs/protocol.md", "| `compile_ms` |", "| `compile_us` |"),
     "compile_us"),
    ("a field the Python client's Artifact stopped reading",
     edit("client/python/kspec/client.py", '"wdtype": "wdtype",', ""),
     "wdtype"),
    ("a binary under another prefix than make install's",
     edit("docs/operations.md", "make install ",
          "/opt/kspec/bin/kspecd --help; make install "), "/opt/kspec/bin"),
]


def self_test(build):
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.abspath(build)
    opts = helps(build)
    failed = 0
    before = set(check(here, opts))
    with tempfile.TemporaryDirectory(prefix="kspec-docscheck.") as tmp:
        for what, plant, expect in PLANTS:
            scratch = os.path.join(tmp, "tree")
            shutil.rmtree(scratch, ignore_errors=True)
            for rel in INPUTS:
                src, dst = os.path.join(here, rel), os.path.join(scratch, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                (shutil.copytree if os.path.isdir(src) else shutil.copy)(
                    src, dst)
            if getattr(plant, "runs", False):
                plant.build = build
                plant(scratch)
                after = check(scratch, helps(os.path.join(scratch, "build")))
            else:
                plant(scratch)
                after = check(scratch, opts)
            new = [p for p in after if p not in before]
            if not any(expect in p for p in new):
                print("docscheck: self-test: FAILED to catch %s (new "
                      "problems: %s)" % (what, new or "none"))
                failed = 1
    if not failed:
        print("docscheck: self-test: each of %d planted drifts caught"
              % len(PLANTS))
    return failed


def main(argv):
    if len(argv) == 2 and argv[0] == "--self-test":
        return self_test(argv[1])
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root, helps(argv[0]))
    for p in problems:
        print("docscheck: " + p)
    if problems:
        print("docscheck: %d problem%s" % (len(problems),
                                          "" if len(problems) == 1 else "s"))
    else:
        print("docscheck: the docs agree with the code")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
