"""Running the `splat` command line in-process from a test, and what a user
error must look like (one `splat: error: ...` line per problem, exit 1, no
traceback)."""
from __future__ import annotations


def run_cli(capsys, *argv):
    """(exit status, stdout, stderr) of `splat ARGV...`, each argument as a string."""
    from splat import cli
    rc = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def assert_user_error(rc, err, *words, lines=1):
    assert rc == 1, err
    got = err.strip().splitlines()
    assert len(got) == lines, err
    assert all(ln.startswith("splat: error: ") for ln in got), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


def without_warnings(err: str) -> str:
    """stderr without its `splat: warning:` and `note:` lines (the recipe's, the backend's)."""
    return "\n".join(ln for ln in err.splitlines() if not ln.startswith(("splat: warning:", "note:")))

