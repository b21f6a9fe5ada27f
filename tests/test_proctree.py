"""``proctree.signal_tree`` with real processes: each process of a tree is signalled once,
whether it is reached through its process group or, having left the group, on its own.

A standard signal sent twice before it is handled is delivered once, so counting SIGTERMs
would hide a double send. The scenes count a realtime signal instead, which Linux queues: every
process blocks it, and after ``signal_tree`` returns each one reports how many are queued."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator

import pytest

from conveyor.executors.proctree import descendants, signal_each, signal_tree

pytestmark = pytest.mark.timeout(60)

SIG = signal.SIGRTMIN + 1

# A leader (a new session, so its own group) and two children: one stays in the group, one
# leaves it (setsid). Each blocks SIG, says it is ready, then on a line from the test counts
# the SIGs queued for it and writes {"who": ..., "count": n}.
SCENE = textwrap.dedent(
    f"""
    import json, os, signal, subprocess, sys
    SIG = {int(SIG)}
    signal.pthread_sigmask(signal.SIG_BLOCK, {{SIG}})
    who = sys.argv[1] if len(sys.argv) > 1 else "leader"
    if who == "away":
        os.setsid()
    def say(**what):  # (one write: the processes share the pipe)
        os.write(1, (json.dumps(what) + "\\n").encode())
    kids = []
    if who == "leader":
        for name in ("stay", "away"):
            kids.append(subprocess.Popen(
                [sys.executable, __file__, name], stdin=subprocess.PIPE
            ))
    say(who=who, pid=os.getpid())
    sys.stdin.readline()
    for kid in kids:
        kid.stdin.write(b"count\\n")
        kid.stdin.flush()
    count = 0
    while signal.sigtimedwait({{SIG}}, 0) is not None:
        count += 1
    say(who=who, count=count)
    for kid in kids:
        kid.wait()
    """
)


@pytest.fixture
def tree(tmp_path: os.PathLike[str]) -> Iterator[subprocess.Popen[str]]:
    script = os.path.join(tmp_path, "scene.py")
    with open(script, "w") as out:
        out.write(SCENE)
    proc = subprocess.Popen(
        [sys.executable, script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _lines(proc: subprocess.Popen[str], count: int) -> list[dict[str, object]]:
    assert proc.stdout is not None
    found = []
    for _ in range(count):
        line = proc.stdout.readline()
        assert line, "the scene ended early"
        found.append(json.loads(line))
    return found


def _by_group_then_each(pid: int, sig: int) -> None:
    """What the supervisor does for a fork server's child: the server signals the group, the
    supervisor the processes its memory samples found."""
    os.killpg(pid, sig)
    signal_each(descendants(pid), sig, pid)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "send",
    [
        lambda pid, sig: signal_tree(pid, sig),
        # (the supervisor's timeout: the tree it knows, and a scan that finds it again)
        lambda pid, sig: signal_tree(pid, sig, descendants(pid)),
        _by_group_then_each,
    ],
    ids=["scan", "known and scan", "group then each"],
)
def test_each_process_of_a_tree_gets_the_signal_once(
    tree: subprocess.Popen[str], send: Callable[[int, int], None]
) -> None:
    ready = _lines(tree, 3)
    assert sorted(str(r["who"]) for r in ready) == ["away", "leader", "stay"]
    away = next(int(str(r["pid"])) for r in ready if r["who"] == "away")
    assert os.getpgid(away) != tree.pid  # (it left the group: only the snapshot reaches it)
    send(tree.pid, SIG)  # (a realtime signal: counted)
    assert tree.stdin is not None
    tree.stdin.write("count\n")
    tree.stdin.flush()
    counts = {str(r["who"]): r["count"] for r in _lines(tree, 3)}
    assert counts == {"leader": 1, "stay": 1, "away": 1}
    assert tree.wait(timeout=30) == 0
