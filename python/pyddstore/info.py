"""ddstore-info: versions, compiled features and every DDSTORE_* variable.

    python -m pyddstore.info            # summary + environment variables
    python -m pyddstore.info --env      # only the variables (name, default, current value)
    python -m pyddstore.info --markdown # docs/environment.md, generated from the registries
"""
import argparse
import os
import sys

import pyddstore
from pyddstore import _core

# Variables read by the test programs only (never by the libraries; not in
# any library's registry): listed so that they are documented in one place.
TEST_ENTRIES = (
    {"name": "DDSTORE_TEST_STRICT", "type": "bool", "default": "0", "choices": None,
     "library": "tests (read by test programs only)", "help": "a skipped test (missing "
     "hardware) counts as a failure (ci/gpu-check.sh sets it where the hardware exists)"},
)


def summary():
    lines = [f"pyddstore {pyddstore.__version__}"]
    lines += [f"  {k}: {v}" for k, v in sorted(_core.build_info().items())]
    try:
        import torch
    except ImportError:
        return "\n".join(lines + ["  torch: not installed"])
    lines.append(f"  torch: {torch.__version__}")
    try:
        from pyddstore import _ddstore_torch  # noqa: F401
        lines.append("  torch extension: loaded")
    except ImportError as e:
        lines.append(f"  torch extension: not available ({e})")
    return "\n".join(lines)


def _current(e):
    """The variable's value as set, flagged when its declaration refuses it
    (what creating a store would fail with)."""
    v = os.environ.get(e["name"])
    if v is None:
        return "(unset)"
    try:
        _core.config_get(e["name"])
    except (ValueError, TypeError, OverflowError) as err:
        return f"{v}  INVALID: {err}"
    return v


def env_table():
    return "\n".join(f"{e['name']:32s} default={e['default'] or '(unset)'!s:12s} "
                     f"current={_current(e)}  [{e['library']}] "
                     f"{e['help']}" for e in _core.config_entries())


def markdown():
    out = ["# Environment variables", "",
           "Generated from the libraries' registries by `python -m pyddstore.info --markdown`;",
           "do not edit by hand. Every value is validated when a store is created: a bad value",
           "fails with an error naming the variable. `./ddstore info` shows the current values.",
           ""]
    by_lib = {}
    for e in list(_core.config_entries()) + list(TEST_ENTRIES):
        by_lib.setdefault(e["library"], []).append(e)
    for lib in sorted(by_lib):
        out += [f"## {lib}", "", "| variable | type | default | meaning |", "|---|---|---|---|"]
        for e in by_lib[lib]:
            t = e["type"] + (f" ({e['choices'].replace('|', ' / ')})" if e.get("choices") else "")
            d = f"`{e['default']}`" if e["default"] not in (None, "") else "unset"
            out.append(f"| `{e['name']}` | {t} | {d} | {e['help']} |")
        out.append("")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ddstore-info", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    if a.markdown:
        print(markdown())
    elif a.env:
        print(env_table())
    else:
        print(summary() + "\n\nenvironment variables:\n" + env_table())
    return 0


def _run():
    """main() for the command line: a reader that stops early (`| head`)
    ends the output quietly, as for any Unix tool."""
    try:
        rc = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader is gone: point stdout at /dev/null so that the
        # interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = 0
    return rc


if __name__ == "__main__":
    sys.exit(_run())
