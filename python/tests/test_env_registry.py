"""Every environment variable the shipped code reads is declared (issue 13).

- A DDSTORE_* name in a string of a shipped C/C++/Python source (a getenv, a
  registry query, a #define used for one, an error message naming it) is a
  variable of a registry: core's (with the tables of the libraries built in,
  pyddstore.torch's too, _core.config_entries()), or the test-only list of
  pyddstore.info.
- No source reads a DDSTORE_* setting by its name outside the declarations
  (issue 22): the C X-macro lists (settings.h and the libraries' *_SETTINGS)
  name each variable once; code reads the typed struct or accessor, Python
  the registry's view (pyddstore/_env.py's Settings, by attribute).
- ddstore-ofi's parameter getters name a parameter of its own table
  (src/ddofi_param.c).
- A direct getenv / os.environ read of any other name is a launcher's or
  libfabric's variable from the short list below; an FI_* variable that the
  code sets is named in docs/environment.md.
- docs/environment.md is what `python -m pyddstore.info --markdown` writes.

Test sources (*/test/, python/tests) may read what they like.
"""
import io
import os
import re
import sys
import tokenize

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Shipped sources: the libraries, the adapters, the extensions, the package.
C_DIRS = ["ddstore-core/src", "ddstore-core/include", "ddstore-mpi/src", "ddstore-mpi/include",
          "ddstore-gpu/src", "ddstore-gpu/include", "ddstore-ofi/src", "ddstore-ofi/include",
          "ddstore-ofi/transport", "ddstore-torch/csrc", "python/pyddstore/csrc",
          "libddstore/src", "libddstore/include"]
PY_DIRS = ["python/pyddstore"]

# Read, not ours: what launchers and libfabric set (documented where read).
EXTERNAL = re.compile(r"^(SLURM_\w+|OMPI_\w+|PMI_\w+|MV2_\w+|PALS_\w+|MPI_LOCALRANKID|"
                      r"RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|FI_\w+|CUDA_VISIBLE_DEVICES|"
                      r"HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|TMPDIR|HOME|USER)$")

# Build-time names (compiler defines, configure variables of docs/building.md
# and docs/installation.md) that messages and #error lines may name: not read
# from the environment at run time.
BUILD_NAMES = {"DDSTORE_TEST_HOOKS", "DDSTORE_WITH_CUDA", "DDSTORE_WITH_HIP",
               "DDSTORE_BUILD_SHARED", "DDSTORE_HAVE_OFI"}

STRING_C = re.compile(r'"(?:[^"\\\n]|\\.)*"')
NAME = re.compile(r"\bDDSTORE_[A-Z0-9_]+")
GETENV_C = re.compile(r'\bgetenv\s*\(\s*"([A-Za-z0-9_]+)"')
SETENV_C = re.compile(r'\bsetenv\s*\(\s*"(FI_[A-Za-z0-9_]+)"')
OFI_PARAM_C = re.compile(r'\bddofi_param_(?:get_\w+|env_name)\s*\(\s*"([A-Z0-9_]+)"')
OFI_DECL = re.compile(r'^\s*\{"([A-Z0-9_]+)",\s*DDOFI_PARAM_', re.M)
GETENV_PY = re.compile(r'(?:os\.environ\.get|os\.getenv|os\.environ\[|_raw)\s*\(?\s*["\']'
                       r'([A-Za-z0-9_]+)["\']')
SETENV_PY = re.compile(r'os\.environ(?:\.setdefault\s*\(|\[)\s*["\'](FI_[A-Za-z0-9_]+)["\']')


def _files(dirs, exts):
    for d in dirs:
        root = os.path.join(TOP, d)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [x for x in dirnames if x not in ("test", "tests", "__pycache__")]
            for f in sorted(filenames):
                if f.endswith(exts):
                    yield os.path.join(dirpath, f)


def _strip_c_comments(text):
    # comments name variables in prose (also retired ones); strings are code
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: "\n" * m.group(0).count("\n"), text,
                  flags=re.S)


def _py_strings(text):
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING:
            yield tok.start[0], tok.string


def _declared():
    from pyddstore import _core, info
    names = {e["name"] for e in _core.config_entries()}
    names |= {e["name"] for e in info.TEST_ENTRIES}
    return names


def _rel(path):
    return os.path.relpath(path, TOP)


def scan(declared, ofi_params, env_doc):
    """Every undeclared read: a list of 'file:line: what'."""
    bad = []

    def check(path, text, strings, getenv_re, setenv_re):
        rel = _rel(path)
        for line, s in strings:
            for n in NAME.findall(s):
                # a prefix ("DDSTORE_OFI_") is no variable
                if not n.endswith("_") and n not in declared and n not in BUILD_NAMES:
                    bad.append(f"{rel}:{line}: {n} is not declared in any registry")
        for m in getenv_re.finditer(text):
            n = m.group(1)
            if not n.startswith("DDSTORE_") and not EXTERNAL.match(n) and n not in declared:
                bad.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: reads {n}, "
                           "neither declared nor a launcher's/libfabric's")
        for m in setenv_re.finditer(text):
            if m.group(1) not in env_doc:
                bad.append(f"{rel}: sets {m.group(1)}, which docs/environment.md does "
                           "not mention")

    for path in _files(C_DIRS, (".c", ".h", ".cpp", ".cc")):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = _strip_c_comments(f.read())
        check(path, text, ((text.count("\n", 0, m.start()) + 1, m.group(0))
                           for m in STRING_C.finditer(text)), GETENV_C, SETENV_C)
        for m in OFI_PARAM_C.finditer(text):
            if m.group(1) not in ofi_params:
                bad.append(f"{_rel(path)}:{text.count(chr(10), 0, m.start()) + 1}: ddofi "
                           f"parameter {m.group(1)} is not in src/ddofi_param.c's table")
    for path in _files(PY_DIRS, (".py",)):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        check(path, text, _py_strings(text), GETENV_PY, SETENV_PY)
    return bad


def _ofi_params():
    with open(os.path.join(TOP, "ddstore-ofi", "src", "ddofi_param.c")) as f:
        return set(OFI_DECL.findall(f.read()))


def _env_doc():
    with open(os.path.join(TOP, "docs", "environment.md")) as f:
        return f.read()


def test_every_read_is_declared():
    bad = scan(_declared(), _ofi_params(), _env_doc())
    assert not bad, "undeclared environment variables:\n" + "\n".join(bad)


def test_scan_finds_a_planted_read(tmp_path, monkeypatch):
    """The scan is not vacuous: an undeclared read in a shipped file fails."""
    d = tmp_path / "ddstore-core" / "src"
    d.mkdir(parents=True)
    (d / "planted.c").write_text('const char *v = getenv("DDSTORE_PLANTED_X");\n'
                                 'int r = ddofi_param_get_bool("NO_SUCH_PARAM", &on);\n'
                                 'const char *w = getenv("SOME_OTHER_VAR");\n')
    p = tmp_path / "python" / "pyddstore"
    p.mkdir(parents=True)
    (p / "planted.py").write_text('import os\nv = os.environ.get("DDSTORE_PLANTED_Y")\n')
    declared, ofi = _declared(), _ofi_params()
    monkeypatch.setattr(sys.modules[__name__], "TOP", str(tmp_path))
    bad = "\n".join(scan(declared, ofi, ""))
    for what in ("DDSTORE_PLANTED_X", "NO_SUCH_PARAM", "SOME_OTHER_VAR", "DDSTORE_PLANTED_Y"):
        assert what in bad, bad


def test_environment_md_is_generated():
    """docs/environment.md is `python -m pyddstore.info --markdown` (regenerate
    it after changing a registry)."""
    from pyddstore import info
    want = info.markdown() + "\n"
    assert _env_doc() == want, ("docs/environment.md is stale: run "
                                ".venv/bin/python -m pyddstore.info --markdown > docs/environment.md")


def test_python_declares_no_setting():
    """One declaration: pyddstore.torch's settings are rows of the C registry
    (owner "torch"), not a Python table."""
    from pyddstore import _core
    from pyddstore.torch import env
    assert not hasattr(env, "ENTRIES")
    torch_rows = [e for e in _core.config_entries() if e["library"] == "torch"]
    assert {"DDSTORE_BATCH_GET", "DDSTORE_COMM", "DDSTORE_AFFINITY_WIDTH"} <= \
        {e["name"] for e in torch_rows}
    assert "DDSTORE_BATCH_GET" in _core.settings()


# ---- no read of a setting by its name outside the declarations -------------

# Where code may name a setting in a string that is exactly its name:
# the declarations themselves (#define *_SETTINGS(X) lists, found below) and
# this allowlist, each with why.
ALLOW_NAME = {
    # the list of the variables only test programs read (no library reads
    # them, so no library declares them): a declaration, not a read
    ("python/pyddstore/info.py", "DDSTORE_TEST_STRICT"),
}
# tools/ may set a variable for the library it starts (setenv/unsetenv):
# a write, not a read.
SETENV_ARG_C = re.compile(r'\b(?:setenv|unsetenv)\s*\(\s*$')
EXACT_NAME_C = re.compile(r'"(DDSTORE_[A-Z0-9_]*[A-Z0-9])"')
DECL_C = re.compile(r"^[ \t]*#[ \t]*define[ \t]+\w*SETTINGS\w*\(X\)(?:[^\n]*\\\n)*[^\n]*",
                    re.M)
NAME_SCAN_C_DIRS = C_DIRS + ["tools"]


def scan_names(top):
    """'file:line: what' for every string that is exactly a DDSTORE_* name
    outside the declarations (C/C++) or anywhere (Python)."""
    bad = []
    for path in _files([os.path.join(top, d) for d in NAME_SCAN_C_DIRS],
                       (".c", ".h", ".cpp", ".cc", ".cu")):
        rel = os.path.relpath(path, top)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = _strip_c_comments(f.read())
        decl = [(m.start(), m.end()) for m in DECL_C.finditer(text)]
        for m in EXACT_NAME_C.finditer(text):
            if any(a <= m.start() < b for a, b in decl):
                continue
            if rel.startswith("tools/") and SETENV_ARG_C.search(text[:m.start()][-40:]):
                continue
            if (rel, m.group(1)) in ALLOW_NAME:
                continue
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{rel}:{line}: names {m.group(1)} (read it through its "
                       "declaration: the typed struct or dds_setting_<field>)")
    for path in _files([os.path.join(top, d) for d in PY_DIRS], (".py",)):
        rel = os.path.relpath(path, top)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for line, tok in _py_strings(text):
            try:
                value = eval(tok, {})   # noqa: S307 - a literal token of our source
            except Exception:  # noqa: BLE001 - f-strings: messages, not names
                continue
            if (isinstance(value, str) and re.fullmatch(r"DDSTORE_[A-Z0-9_]*[A-Z0-9]", value)
                    and (rel, value) not in ALLOW_NAME):
                bad.append(f"{rel}:{line}: names {value} (read it through "
                           "pyddstore._env's Settings view)")
    return bad


def test_no_setting_read_by_name():
    bad = scan_names(TOP)
    assert not bad, "settings named outside their declaration:\n" + "\n".join(bad)


def test_name_scan_finds_planted_reads(tmp_path):
    """The scan is not vacuous: a read by name in C and in Python fails; the
    declaration list and a tool's setenv do not."""
    d = tmp_path / "ddstore-core" / "src"
    d.mkdir(parents=True)
    (d / "planted.c").write_text(
        '#define PLANT_SETTINGS(X) \\\n    X(f, "DDSTORE_DECLARED", INT, "0", NULL, "core", "h")\n'
        'int a = dds_config_get_int("DDSTORE_PLANTED_C", &v);\n'
        'const char *msg = "DDSTORE_IN_A_MESSAGE=%s is bad";\n')
    t = tmp_path / "tools"
    t.mkdir()
    (t / "tool.c").write_text('setenv("DDSTORE_SET_BY_TOOL", "1", 1);\n'
                              'getenv("DDSTORE_READ_BY_TOOL");\n')
    p = tmp_path / "python" / "pyddstore"
    p.mkdir(parents=True)
    (p / "planted.py").write_text('import os\nv = _core.config_get("DDSTORE_PLANTED_PY")\n'
                                  'm = f"DDSTORE_X={v!r}: bad"\n')
    bad = "\n".join(scan_names(str(tmp_path)))
    for what in ("DDSTORE_PLANTED_C", "DDSTORE_READ_BY_TOOL", "DDSTORE_PLANTED_PY"):
        assert what in bad, bad
    for ok in ("DDSTORE_DECLARED", "DDSTORE_SET_BY_TOOL", "DDSTORE_IN_A_MESSAGE", "DDSTORE_X"):
        assert ok not in bad, bad


def test_python_view_reads_the_registry(monkeypatch):
    """env.Settings: one attribute per declared setting, parsed and checked
    by C (a bad value names the variable and the value), kept once read."""
    from pyddstore.torch import env
    monkeypatch.setenv("DDSTORE_AFFINITY_WIDTH", "2K")
    s = env.read()
    assert s.affinity_width == 2048            # C's SIZE rule (K suffix)
    monkeypatch.setenv("DDSTORE_AFFINITY_WIDTH", "3")
    assert s.affinity_width == 2048            # read once per view
    assert env.read().affinity_width == 3
    monkeypatch.setenv("DDSTORE_COMM", "TORCH")
    assert env.comm_kind() == "torch"          # ENUM: the canonical spelling
    monkeypatch.setenv("DDSTORE_COMM", "bogus")
    with pytest.raises(ValueError, match="DDSTORE_COMM='bogus'"):
        env.comm_kind()
    with pytest.raises(AttributeError, match="no_such_setting"):
        env.read().no_such_setting


@pytest.mark.parametrize("name", ["DDSTORE_METHOD", "DDSTORE_HANDSHAKE_TIMEOUT_S",
                                  "DDSTORE_HANDSHAKE_DIR", "DDSTORE_COLLECTIVE_TIMEOUT_S"])
def test_python_reads_through_c_registry(name, monkeypatch):
    from pyddstore.torch import env
    monkeypatch.setenv(name, "not-a-valid-value-!")
    fn = {"DDSTORE_METHOD": lambda: env.method(0),
          "DDSTORE_HANDSHAKE_TIMEOUT_S": env.handshake_timeout,
          "DDSTORE_COLLECTIVE_TIMEOUT_S": env.collective_timeout,
          "DDSTORE_HANDSHAKE_DIR": env.handshake_dir}[name]
    if name == "DDSTORE_HANDSHAKE_DIR":  # a string: any value is valid
        assert fn() == "not-a-valid-value-!"
        return
    with pytest.raises(ValueError, match=name):
        fn()


def test_local_rank_same_launchers_as_ofi(monkeypatch):
    """The node-local rank: Python (CPU pinning of loader workers) and
    ddstore-ofi (the NIC of nic_map) read the same launcher variables in the
    same order, so both agree on a process's local rank."""
    from pyddstore.torch import env
    src = open(os.path.join(TOP, "ddstore-ofi", "src", "ddofi_config.c")).read()
    body = src[src.index("int ddofi_env_local_rank(void)"):]
    body = body[:body.index("};")]
    assert tuple(re.findall(r'"([A-Z0-9_]+)"', body)) == env.LOCAL_RANK_VARS
    for v in env.LOCAL_RANK_VARS:
        monkeypatch.delenv(v, raising=False)
    assert env.local_rank() == 0
    monkeypatch.setenv("LOCAL_RANK", "3")            # torchrun alone
    assert env.local_rank() == 3
    monkeypatch.setenv("PALS_LOCAL_RANKID", "5")     # earlier in the list: wins
    assert env.local_rank() == 5


@pytest.mark.parametrize("var,value", [("DDSTORE_PROGRESS", "abc"),
                                       ("DDSTORE_READ_TIMEOUT_S", "0"),
                                       ("DDSTORE_OFI_PARK_MS", "-1")])
def test_info_flags_a_value_its_declaration_refuses(var, value):
    """`./ddstore info` printed current=abc for a bad value without a word
    (issue 36 item 5): now the value is marked INVALID with the reason a
    store's creation would give; a good value is not."""
    import subprocess
    import sys
    import pyddstore
    if var.startswith("DDSTORE_OFI_") and not pyddstore.HAVE_OFI:
        pytest.skip("built without libfabric (HAVE_OFI False): no DDSTORE_OFI_* setting")
    env = dict(os.environ, **{var: value})
    out = subprocess.run([sys.executable, "-m", "pyddstore.info", "--env"], env=env,
                         capture_output=True, text=True, timeout=120).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith(var + " "))
    assert f"current={value}  INVALID: {var}=" in line, line
    good = subprocess.run([sys.executable, "-m", "pyddstore.info", "--env"],
                          env=dict(os.environ, **{var: "1"}), capture_output=True,
                          text=True, timeout=120).stdout
    assert "INVALID" not in next(ln for ln in good.splitlines() if ln.startswith(var + " "))
