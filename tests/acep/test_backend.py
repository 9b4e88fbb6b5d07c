"""The compiled kernel and its pure-Python fallback: one behaviour, reported by backend()."""

import os
import textwrap
from pathlib import Path

import pytest
from support.cli import run_acep, run_without_cython

import acep
import acep._backend

ROOT = Path(__file__).resolve().parents[2]


def test_backend_is_compiled_where_ci_requires_it():
    if os.environ.get("ACEP_REQUIRE_COMPILED"):
        assert acep.backend() == "compiled"
    assert acep.backend() in ("compiled", "python")


def test_backend_all_names_every_compiled_module_setup_py_builds():
    """``acep backend --all``: one line per module setup.py compiles, the kernel's first."""
    r = run_acep("backend", "--all")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    names = [row[-1] for row in rows]
    assert names == [name for _, name in acep._backend.MODULES]
    built = (ROOT / "setup.py").read_text()
    for name in names:
        assert name.replace(".", "/") in built
    assert rows[0][-2] == acep.backend()  # the kernel, as plain `acep backend` says
    if os.environ.get("ACEP_REQUIRE_COMPILED"):
        assert all(row[-2] == "compiled" for row in rows), r.stdout
    assert all(row[-2] in ("compiled", "python") for row in rows)


def test_fallback_runs_without_cython_installed():
    """A device without Cython: the kernel source runs with the shim, same matches."""
    code = textwrap.dedent("""
        import acep
        from acep.matcher import Matcher, best_per_point
        s = "a1 e2 e3 b4 c5 e6 a7 e8 e9 c10 d11 a12 e13 b14 d15".split()
        ev = [{"type": x[0], "t": float(x[1:])} for x in s]
        m = Matcher("a (b|c) d b", 5, 2, backend="python")
        print(acep.backend(), sorted(best_per_point(m.match(ev)).items()))
    """)
    r = run_without_cython(code, env={"ACEP_KERNEL": "python"}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("python ")
    from acep.matcher import Matcher, best_per_point

    s = "a1 e2 e3 b4 c5 e6 a7 e8 e9 c10 d11 a12 e13 b14 d15".split()
    ev = [{"type": x[0], "t": float(x[1:])} for x in s]
    expected = sorted(best_per_point(Matcher("a (b|c) d b", 5, 2).match(ev)).items())
    assert r.stdout.strip() == f"python {expected}"


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown backend"):
        acep.Matcher("a b", 1, 0, backend="gpu")


def test_the_match_summary_names_the_kernel_that_ran(tmp_path):
    """`acep match --backend python` says "python kernel" even where the compiled one is the
    default, so a user comparing speeds knows what they measured."""
    events = tmp_path / "e.jsonl"
    events.write_text('{"type": "a", "t": 1}\n{"type": "b", "t": 2}\n')
    for name in ("python", *(["compiled"] if acep.backend() == "compiled" else [])):
        r = run_acep("match", "-p", "a b", "-w", "5", "--backend", name, events, cwd=ROOT,
                     timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"{name} kernel" in r.stderr and r.stdout.count("\n") == 1


def _without_compiled_kernel(tmp_path: Path) -> Path:
    """A copy of the acep package with its sources only, as on a device without a C
    compiler at install time."""
    import shutil

    shutil.copytree(ROOT / "acep", tmp_path / "acep",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    return tmp_path


@pytest.mark.parametrize("kernel, code, line", [
    ("", 0, "python"),
    ("python", 0, "python"),
    ("compiled", 2, "acep backend: ACEP_KERNEL=compiled, but the compiled kernel is not "
                    "built; reinstall with a C compiler and Cython (pip install .), or use "
                    "ACEP_KERNEL=python"),
    ("gpu", 2, "acep backend: ACEP_KERNEL='gpu' is not a kernel: set it to compiled or "
               "python, or unset it"),
])
def test_acep_backend_without_the_compiled_kernel(tmp_path, kernel, code, line):
    """Forcing the compiled kernel where it is not built was a RuntimeError traceback."""
    home = _without_compiled_kernel(tmp_path)
    r = run_acep("backend", cwd=home, env={"ACEP_KERNEL": kernel, "PYTHONPATH": str(home)},
                 timeout=60)
    assert r.returncode == code
    assert (r.stdout if code == 0 else r.stderr) == line + "\n"


def test_acep_match_backend_compiled_without_the_kernel_names_the_option(tmp_path):
    home = _without_compiled_kernel(tmp_path)
    (home / "e.jsonl").write_text('{"type": "a", "t": 1}\n')
    r = run_acep("match", "-p", "a", "-w", "5", "--backend", "compiled", "e.jsonl", cwd=home,
                 env={"ACEP_KERNEL": None, "PYTHONPATH": str(home)}, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("acep match: the compiled kernel is not built; reinstall with a C "
                        "compiler and Cython (pip install .), or use --backend python\n")
