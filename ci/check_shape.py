#!/usr/bin/env python3
"""check_shape.py: no source file over 1,000 lines, no file circles, unity-safe
torch sources.

    ci/check_shape.py            check; exit 0 when the shape holds, 1 when not
    ci/check_shape.py --list     also print every package's file graph

Two rules for the production sources (C/C++ and Python, not tests) of the
packages (ddstore-*/, libddstore/, python/pyddstore/):

  size     no file over MAX_LINES lines.  A file that grows past it is split
           by concern (docs/design.md's code map says which file does what).
  circles  no call circle between the files of one package: file A uses a
           function (or global) defined in file B and B, directly or through
           other files, one defined in A.  The calls between files must form
           a DAG, so each file can be read with only the files below it.

The circle check is a symbol scan of the C sources, no compiler needed: the
external (non-static) functions and variables each .c file defines at file
scope, and the identifiers each file uses.  Static definitions, macros and
headers are not edges (a header declares; the file defining the symbol is the
edge's end).  C++ (ddstore-torch) and Python files are checked for size only:
C++ names (members, overloads, namespaces) need a compiler's view (nm on
the objects) that this scan does not have.

A third rule for the torch extension's .cpp files (ddstore-torch/csrc), which
the CI build compiles as unity sources (concatenated, //bazel/config:torch_unity):

  unity    no name defined file-locally (in an anonymous namespace, or
           static) in two of them.  Concatenated, two such definitions are a
           redefinition error at best, and two overloads at worst, where a
           call could quietly bind to the other file's function.  A helper
           that two files need goes into a shared header (ddstore_torch.h).

ALLOWED lists files that are being split elsewhere right now; empty it once
they are merged.  Run from the quick and full C stages of ci/run_tests.py
(cunit, c).
"""
import argparse
import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES = 1000

# Where the production sources are (relative to TOP) and what is not one.
ROOTS = ["libddstore", "python/pyddstore"] + sorted(
    d for d in os.listdir(TOP) if d.startswith("ddstore-") and os.path.isdir(os.path.join(TOP, d)))
C_EXT = (".c", ".h", ".cc", ".cpp", ".hpp")
PY_EXT = (".py",)
NOT_PRODUCTION = ("test", "tests", "fuzz", "bench", "examples")

# Files other helpers are splitting at the time of writing (issue 22).  The
# coordinator empties this list after merging their branches; a file listed
# here is exempt from both rules (its size and the circles it is part of).
ALLOWED = {
}


def sources():
    """Repo-relative paths of the production sources, sorted."""
    out = []
    for root in ROOTS:
        for d, dirs, files in os.walk(os.path.join(TOP, root)):
            dirs[:] = sorted(x for x in dirs if x not in NOT_PRODUCTION
                             and not x.startswith((".", "__pycache__")))
            for f in files:
                if f.endswith(C_EXT + PY_EXT) and not re.search(r"(^test_|_test\.|_mpitest\.)", f):
                    out.append(os.path.relpath(os.path.join(d, f), TOP))
    return sorted(out)


def package(path):
    """The package a file belongs to: its top directory (python/pyddstore
    for the Python package and its C extension)."""
    parts = path.split(os.sep)
    return os.sep.join(parts[:2]) if parts[0] == "python" else parts[0]


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')
_PREPROC = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def strip_c(text):
    """The code without comments, string/char literals and preprocessor
    lines (so macro bodies and #if branches do not confuse the scan)."""
    text = _COMMENT.sub(" ", text)
    text = _STRING.sub('""', text)
    return _PREPROC.sub("", text)


def scan_c(text):
    """(defined, used): the external symbols a C/C++ file defines at file
    scope, and every identifier it uses inside function bodies and
    initialisers."""
    code = strip_c(text)
    defined, used = set(), set()
    depth = 0
    decl = []          # file-scope text since the last ';' or '}'
    body = []
    for ch in code:
        if depth == 0:
            if ch == "{":
                d = "".join(decl)
                head = d.strip()
                # a function: "... name ( params ) {"; extern "C" { ... } and
                # namespaces are transparent (their contents stay at depth 0)
                m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*(?:const\s*)?(?:noexcept\s*)?$", head)
                if re.search(r'(^|\s)(extern\s*""|namespace(\s+\w+)?)\s*$', head):
                    decl = []
                    continue
                if m and m.group(1) not in _KEYWORDS and not re.search(r"\bstatic\b|\binline\b", head):
                    defined.add(m.group(1))
                elif not m:
                    # "type name[] = {": a global with an initialiser
                    g = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[[^\]]*\])*\s*=\s*$", head)
                    if g and not re.search(r"\bstatic\b|\btypedef\b", head):
                        defined.add(g.group(1))
                depth = 1
                decl = []
            elif ch == "}":
                decl = []    # end of an extern "C" / namespace block
            elif ch == ";":
                d = "".join(decl)
                # "type name = value;" or "type name;" at file scope: a global
                if not re.search(r"\b(static|extern|typedef)\b|\(", d):
                    g = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[[^\]]*\])*\s*(?:=[^;]*)?$", d.strip())
                    if g and re.search(r"\w\s+[*\s]*" + g.group(1), d):
                        defined.add(g.group(1))
                used.update(_IDENT.findall(d))
                decl = []
            else:
                decl.append(ch)
        else:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            body.append(ch)
            if depth == 0:
                used.update(_IDENT.findall("".join(body)))
                body = []
    return defined, used


def circles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# A definition at namespace scope starting a line: "type name(", "type name =",
# "struct name", ...  (the house style puts a definition's type and name on
# one line; members and locals are indented).
_DEF = re.compile(r"^(?:static\s+|inline\s+|constexpr\s+|const\s+)*"
                  r"(?:(?:struct|class|enum(?:\s+class)?|using)\s+(\w+)"
                  r"|(?:template\s*<[^>]*>\s*)?(?:[\w:<>,*&\[\]]+\s+)+[*&]*(\w+)\s*[(=\[;{])")


def file_local_names(text):
    """The names a C++ file defines in its anonymous namespaces or as static
    at namespace scope."""
    names, anon = set(), False
    for line in text.split("\n"):
        if re.match(r"^namespace\s*\{", line):
            anon = True
            continue
        if re.match(r"^\}\s*//\s*namespace\s*$", line):
            anon = False
            continue
        if not (anon or line.startswith("static ")) or not line.strip() or line[0] in " \t/#}{":
            continue
        m = _DEF.match(line)
        if m:
            names.add(m.group(1) or m.group(2))
    return names


def unity_clashes(texts):
    """[(name, files)] of the names defined file-locally in more than one of
    `texts` ({file: text})."""
    where = {}
    for f, text in texts.items():
        for n in file_local_names(text):
            where.setdefault(n, []).append(f)
    return sorted((n, sorted(fs)) for n, fs in where.items() if len(fs) > 1)


def check(files, show=False, out=sys.stdout):
    """Problems found in `files` (repo-relative), as lines."""
    problems = []
    by_pkg = {}
    unity = {}
    for f in files:
        with open(os.path.join(TOP, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        n = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if n > MAX_LINES and f not in ALLOWED:
            problems.append(f"{f}: {n} lines (more than {MAX_LINES}): split it by concern")
        if f.endswith(".c"):
            by_pkg.setdefault(package(f), {})[f] = scan_c(text)
        if f.endswith(".cpp") and "/csrc/" in f.replace(os.sep, "/"):
            unity[f] = text
    for name, fs in unity_clashes(unity):
        problems.append(f"{name}: defined file-locally in {', '.join(fs)}; the unity build "
                        "concatenates them: rename one, or share it from a header")
    for pkg, scans in sorted(by_pkg.items()):
        owner = {}
        for f, (defined, _) in scans.items():
            for sym in defined:
                owner.setdefault(sym, f)
        graph = {}
        for f, (_, used) in scans.items():
            graph[f] = {}
            for sym in used:
                g = owner.get(sym)
                if g is not None and g != f:
                    graph[f].setdefault(g, []).append(sym)
        if show:
            print(f"{pkg}:", file=out)
            for f in sorted(graph):
                for g, syms in sorted(graph[f].items()):
                    print(f"  {os.path.basename(f)} -> {os.path.basename(g)}: "
                          f"{', '.join(sorted(syms)[:6])}{' ...' if len(syms) > 6 else ''}", file=out)
        for comp in circles({f: set(e) for f, e in graph.items()}):
            if all(f in ALLOWED for f in comp) or len([f for f in comp if f not in ALLOWED]) < 2 \
                    and any(f in ALLOWED for f in comp):
                continue
            lines = [f"{pkg}: file circle {' <-> '.join(os.path.basename(f) for f in comp)}"]
            for f in comp:
                for g, syms in sorted(graph[f].items()):
                    if g in comp:
                        lines.append(f"    {os.path.basename(f)} uses {os.path.basename(g)}'s "
                                     f"{', '.join(sorted(syms)[:4])}{' ...' if len(syms) > 4 else ''}")
            problems.append("\n".join(lines))
    return problems


def self_test():
    """The check fails where it must: a 1,001-line file, a two-file circle;
    and passes a 1,000-line file and a one-way call.  0 or 1."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        def put(name, text):
            path = os.path.join(d, name)
            with open(path, "w") as fh:
                fh.write(text)
            return path
        ok = put("ok.py", "x = 1\n" * MAX_LINES)
        big = put("big.py", "x = 1\n" * (MAX_LINES + 1))
        a = put("a.c", "int b_fn(void);\nint a_fn(void)\n{\n    return b_fn();\n}\n")
        b = put("b.c", "int a_fn(void);\nint b_fn(void)\n{\n    return a_fn();\n}\n")
        c = put("c.c", "static int c_helper(void) { return 1; }\n"
                       "int c_fn(void)\n{\n    return a_fn() + c_helper();\n}\n")
        d1 = put("csrc_x.cpp", "namespace {\nint helper(int v)\n{\n    return v;\n}\n}  // namespace\n")
        d2 = put("csrc_y.cpp", "namespace {\nstd::string helper(py::handle v)\n{\n}\n}  // namespace\n"
                               "static int other = 1;\n")
        d3 = put("csrc_z.cpp", "static int other(void) { return 0; }\nint shared(int v)\n{\n}\n")
        cases = [([ok], 0), ([big], 1), ([a, c], 0), ([a, b], 1), ([a, b, c], 1)]
        unity_cases = [({d1: 0, d3: 0}, 0), ({d1: 0, d2: 0}, 1), ({d2: 0, d3: 0}, 1)]
        bad = 0
        for texts, want in unity_cases:
            texts = {f: open(f).read() for f in texts}
            got = len(unity_clashes(texts))
            if got != want:
                print(f"check_shape self-test: unity {[os.path.basename(f) for f in texts]}: "
                      f"{got} clashes, expected {want}")
                bad = 1
        for files, want in cases:
            got = len(check(files))
            if got != want:
                print(f"check_shape self-test: {[os.path.basename(f) for f in files]}: "
                      f"{got} problems, expected {want}")
                bad = 1
    print("check_shape self-test: " + ("FAILED" if bad else "OK"))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print each package's file graph")
    ap.add_argument("--self-test", action="store_true",
                    help="check that the checker fails on a 1,001-line file and a circle")
    ap.add_argument("files", nargs="*", help="check these (repo-relative) instead of the packages")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    files = args.files or sources()
    problems = check(files, show=args.list)
    for p in problems:
        print("check_shape: " + p)
    if problems:
        print(f"check_shape: FAILED ({len(problems)} problems in {len(files)} files)")
        return 1
    print(f"check_shape: OK ({len(files)} source files, none over {MAX_LINES} lines, "
          f"no file circles, no name file-local to two torch sources; {len(ALLOWED)} allowed "
          "while being split elsewhere)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
