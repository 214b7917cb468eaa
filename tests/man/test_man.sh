#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_man.sh: the man pages say what the tool and the header say, collected from them
# mechanically, so that a new option or function cannot be added without its page.
#   smattn(1): the commands are those of `smattn help`; for each, the options of its usage
#   lines (`smattn CMD --help`) are exactly the options of its SYNOPSIS entry and of its
#   entry in `smattn help`, and every option its --help prints anywhere appears in its
#   SYNOPSIS entry or its COMMANDS entry.
#   smattn(3): every function declared in include/smattn.h is in the SYNOPSIS with the
#   header's prototype (return type, parameter types and names), no other smattn_ function
#   is there, every type is named on the page (a typedef's name; "struct X" for a tag the
#   header uses as such), and every status
#   code appears with its pinned value, "SMATTN_ERR_X (N)".
# The pages are read as man shows them (groff, no hyphenation, wide lines).
# Usage: test_man.sh SMATTN_CLI; run by `make check-man` (and so by `make check`).
set -euo pipefail
cli=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
py=$(test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_man: FAILED: $*" >&2; exit 1; }

render() { groff -man -Tascii -P-cbou -rHY=0 -rLL=250n "$1" 2>/dev/null; }
render "$root/man/smattn.1" >"$tmp/smattn.1.txt" || fail "groff man/smattn.1"
render "$root/man/smattn.3" >"$tmp/smattn.3.txt" || fail "groff man/smattn.3"

# every command's --help, and the top-level usage
"$cli" help >"$tmp/help.txt" || fail "smattn help: exit $?"
cmds=$(awk '/^commands:/ {on = 1; next} on && /^$/ {exit} on && /^  [a-z]/ {print $1}' "$tmp/help.txt")
[ "$(wc -w <<<"$cmds")" -ge 8 ] || fail "smattn help lists only: $cmds"
for c in $cmds; do
    "$cli" "$c" --help >"$tmp/help.$c.txt" || fail "smattn $c --help: exit $?"
done

"$py" - "$tmp" "$root/include/smattn.h" $cmds <<'PY' || fail "the man pages and the tool or the header disagree (above)"
import re, sys
tmp, header, cmds = sys.argv[1], sys.argv[2], sys.argv[3:]
errors = []
opt_re = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
def opts(text):
    return set(opt_re.findall(text)) - {"--help"}

def usage_lines(text):
    """The usage line of a --help and its continuation lines (those starting with '[')."""
    lines, out = text.splitlines(), []
    for k, l in enumerate(lines):
        if l.startswith("usage:"):
            out.append(l)
            for m in lines[k + 1:]:
                if not re.match(r"^\s+\[", m):
                    break
                out.append(m)
            break
    return "\n".join(out)

def options_block(text):
    """Lines of an 'options:' list that name an option ('  --x ...')."""
    return "\n".join(l for l in text.splitlines() if re.match(r"^\s+-", l))

top = open(f"{tmp}/help.txt").read()
def top_entry(cmd):
    """cmd's entry in `smattn help`: its line and the continuation lines of its options."""
    lines = top.splitlines()
    for k, l in enumerate(lines):
        if re.match(rf"^  {cmd}\b", l):
            out = [l]
            for m in lines[k + 1:]:
                if not re.match(r"^\s+\[", m):
                    break
                out.append(m)
            return "\n".join(out)
    return None

page1 = open(f"{tmp}/smattn.1.txt").read()
def section(page, name):
    m = re.search(rf"^{name}\n(.*?)(?=^[A-Z][A-Z ]+\n)", page, re.S | re.M)
    return m.group(1) if m else ""
synopsis1 = section(page1, "SYNOPSIS")
commands1 = section(page1, "COMMANDS")
def synopsis_entry(cmd):
    """The SYNOPSIS entry of cmd: from 'smattn CMD' to the next 'smattn ' entry."""
    m = re.search(rf"^ *smattn {cmd}\b(.*?)(?=^ *smattn |\Z)", synopsis1, re.S | re.M)
    return m.group(0) if m else None
def commands_entry(cmd):
    """cmd's paragraph under COMMANDS: from its tag line (indented as the other tags)
    to the next tag at that indent."""
    tags = list(re.finditer(r"^( *)(\S+)", commands1, re.M))
    indent = min((len(t.group(1)) for t in tags), default=0)
    starts = [t for t in tags if len(t.group(1)) == indent]
    for k, t in enumerate(starts):
        if t.group(2) == cmd:
            end = starts[k + 1].start() if k + 1 < len(starts) else len(commands1)
            return commands1[t.start():end]
    return None

for cmd in cmds:
    h = open(f"{tmp}/help.{cmd}.txt").read()
    if cmd == "help":  # `smattn help --help` is the top-level usage: its own entry is enough
        if "smattn help" not in synopsis1 and not re.search(r"\|\s*help", synopsis1):
            errors.append("smattn(1) SYNOPSIS does not show 'help'")
        continue
    usage = opts(usage_lines(h)) | opts(options_block(h))
    syn = synopsis_entry(cmd)
    if syn is None:
        if not re.search(rf"\b{cmd}\b", synopsis1):
            errors.append(f"smattn(1) SYNOPSIS has no entry for '{cmd}'")
        syn = ""
    if usage != opts(syn):
        errors.append(f"smattn {cmd}: options of --help's usage {sorted(usage)} != smattn(1) "
                      f"SYNOPSIS {sorted(opts(syn))}")
    te = top_entry(cmd)
    if te is None:
        errors.append(f"smattn help has no entry line for '{cmd}'")
    elif opts(te) != usage:
        errors.append(f"smattn {cmd}: options of 'smattn help' {sorted(opts(te))} != "
                      f"of 'smattn {cmd} --help' {sorted(usage)}")
    body = commands_entry(cmd)
    if body is None:
        errors.append(f"smattn(1) COMMANDS has no entry for '{cmd}'")
        body = ""
    for o in sorted(opts(h)):
        if o not in opts(body) and o not in opts(syn):
            errors.append(f"smattn {cmd} --help prints {o}; smattn(1) does not show it for {cmd}")
    for o in sorted(usage):
        if o not in opts(body):
            errors.append(f"smattn {cmd} {o}: not described in smattn(1) COMMANDS, {cmd}")

# ---- smattn(3) against include/smattn.h
src = open(header).read()
src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
src = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith("#"))
src = src.replace("SMATTN_NODISCARD", " ")
def norm(d):
    d = re.sub(r"\s+", " ", d).strip()
    d = re.sub(r"\s*([(),\[\]*])\s*", r"\1", d)
    return d.replace("const*", "const *")
def prototypes(text):
    """name -> normalised prototype of every 'RET smattn_x(ARGS);' in text (no typedefs)."""
    out = {}
    for chunk in re.split(r"[;{}]", text):
        m = re.search(r"((?:const\s+)?[A-Za-z_]\w*[\s*]+)(smattn_\w+)\s*\(([^()]*)\)\s*$", chunk)
        if m and not re.search(r"\btypedef\b", chunk):
            out[m.group(2)] = norm("".join(m.groups()[:2]) + "(" + m.group(3) + ")")
    return out
decl = prototypes(src)
types = set(re.findall(r"}\s*(smattn_\w+)\s*;", src)) | set(re.findall(r"\(\s*\*\s*(smattn_\w+)\s*\)", src))
# a struct tag the header itself uses as "struct X" (the layout pointer of smattn_problem)
types |= {f"struct {t}" for t in re.findall(r"\bstruct\s+(smattn_\w+)\s*\*", src)}
codes = dict(re.findall(r"\b(SMATTN_(?:OK|ERR_\w+))\s*=\s*(\d+)", src))
if len(decl) < 20 or len(types) < 10 or len(codes) < 18:
    errors.append(f"include/smattn.h parsed to {len(decl)} functions, {len(types)} types, "
                  f"{len(codes)} codes: the parser is wrong")

page3 = open(f"{tmp}/smattn.3.txt").read()
syn3 = section(page3, "SYNOPSIS")
shown = prototypes(syn3)
for name, proto in sorted(decl.items()):
    if name not in shown:
        errors.append(f"smattn(3) SYNOPSIS lacks {name}: {proto};")
    elif shown[name] != proto:
        errors.append(f"smattn(3) SYNOPSIS shows  {shown[name]};\n   include/smattn.h says {proto};")
for name in sorted(set(shown) - set(decl)):
    errors.append(f"smattn(3) SYNOPSIS shows {name}, which include/smattn.h does not declare")
flat3 = re.sub(r"\s+", " ", page3)
for t in sorted(types):
    if not re.search(rf"(?<![\w]){re.escape(t)}(?![\w])", flat3):
        errors.append(f"smattn(3) does not name the type {t} of include/smattn.h")
for c, v in sorted(codes.items(), key=lambda kv: int(kv[1])):
    if not re.search(rf"\b{c} \({v}\)", flat3):
        errors.append(f"smattn(3) does not give the status {c} ({v})")

for e in errors:
    print("  " + e, file=sys.stderr)
print(f"test_man: smattn(1): {len(cmds)} commands; smattn(3): {len(decl)} functions, "
      f"{len(types)} types, {len(codes)} status codes")
sys.exit(1 if errors else 0)
PY
echo "test_man: the man pages cover every option of smattn --help and every declaration of include/smattn.h: passed"
