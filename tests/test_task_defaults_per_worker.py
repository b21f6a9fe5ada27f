"""``[tasks.*]`` defaults belong to a Worker, not to the process (SPEC §10, issue 21): two
Workers in one process with different ``[tasks]`` tables each make their tasks with their own
defaults, interleaved in one thread or side by side in two, and neither sees the other's.

Real task modules in tmp_path, real Workers with the in-process scheduler and executor.
"""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import conveyor
from conveyor.task import TaskDefaults, task_defaults_in_use, use_task_defaults

WriteModule = Callable[..., str]

TASKS = """
    import conveyor

    seen = []  # (who, region) of every Leaf made by a complete() check

    class Leaf(conveyor.Task):
        region = conveyor.Parameter(default="us")
        out = conveyor.Parameter()

        def output(self):
            return conveyor.LocalTarget(f"{self.out}/leaf-{self.region}")

        def run(self):
            with self.output().open("w") as f:
                f.write(self.region)

    class Top(conveyor.WrapperTask):
        out = conveyor.Parameter()

        def requires(self):
            return Leaf(out=self.out)

    class Dynamic(conveyor.Task):
        out = conveyor.Parameter()

        def output(self):
            return conveyor.LocalTarget(f"{self.out}/dynamic")

        def run(self):
            leaf = yield Leaf(out=self.out)
            with self.output().open("w") as f:
                f.write(leaf.path)

    class Probe(conveyor.Task):
        who = conveyor.Parameter()

        def complete(self):
            seen.append((self.who, Leaf(out="-").region))
            return True
"""


@pytest.fixture(autouse=True)
def _fresh_defaults() -> Iterator[None]:
    """Each test starts, and leaves, with empty process defaults."""
    use_task_defaults({})
    yield
    use_task_defaults({})


def _config(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def _region_config(tmp_path: Path, region: str, extra: str = "") -> str:
    return _config(tmp_path, f"{region}.toml", f'{extra}\n[tasks.Leaf]\nregion = "{region}"\n')


def test_two_interleaved_workers_make_dependencies_with_their_own_defaults(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """Two Workers alive at once in one thread: each walk makes the Leaf its own file sets,
    and each run writes its own Leaf's output."""
    module = __import__(task_module(TASKS))
    eu_dir, asia_dir = tmp_path / "eu-out", tmp_path / "asia-out"
    eu_dir.mkdir()
    asia_dir.mkdir()
    with (
        conveyor.Worker(config=_region_config(tmp_path, "eu")) as eu,
        conveyor.Worker(config=_region_config(tmp_path, "asia")) as asia,
    ):
        assert eu.add(module.Top(out=str(eu_dir)))
        assert asia.add(module.Top(out=str(asia_dir)))
        eu_leaves = {t.region for t in eu.tasks().values() if isinstance(t, module.Leaf)}
        asia_leaves = {t.region for t in asia.tasks().values() if isinstance(t, module.Leaf)}
        assert (eu_leaves, asia_leaves) == ({"eu"}, {"asia"})
        assert eu.run() and asia.run()
    assert [p.name for p in eu_dir.iterdir()] == ["leaf-eu"]
    assert [p.name for p in asia_dir.iterdir()] == ["leaf-asia"]


def test_two_workers_in_two_threads_do_not_see_each_others_defaults(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """Each thread builds its Worker, waits until both exist, then walks and runs: each
    worker's tasks, and the tasks made in its thread while it lives, take its defaults."""
    module = __import__(task_module(TASKS))
    both = threading.Barrier(2, timeout=30)
    made: dict[str, object] = {}
    errors: list[BaseException] = []

    def serve(region: str) -> None:
        out = tmp_path / f"{region}-out"
        out.mkdir()
        try:
            with conveyor.Worker(config=_region_config(tmp_path, region)) as worker:
                both.wait()  # both workers are alive now
                made[f"{region}-in-block"] = module.Leaf(out="-").region
                made[f"{region}-ok"] = worker.add(module.Top(out=str(out))) and worker.run()
                made[f"{region}-files"] = sorted(p.name for p in out.iterdir())
                both.wait()  # neither closes before the other has run
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            both.abort()

    threads = [threading.Thread(target=serve, args=(r,)) for r in ("eu", "asia")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert made == {
        "eu-in-block": "eu",
        "eu-ok": True,
        "eu-files": ["leaf-eu"],
        "asia-in-block": "asia",
        "asia-ok": True,
        "asia-files": ["leaf-asia"],
    }
    assert module.Leaf(out="-").region == "us"  # neither leaked into the process


def test_complete_checks_on_threads_take_the_walking_workers_defaults(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """With parallel scheduling complete() runs on checker threads: a task it makes takes
    the defaults of the worker walking, not the process's."""
    module = __import__(task_module(TASKS))
    parallel = '[worker]\nparallel_scheduling = true\nworkers = 2\nexecutor = "thread"\n'
    with (
        conveyor.Worker(config=_region_config(tmp_path, "eu", parallel)) as eu,
        conveyor.Worker(config=_region_config(tmp_path, "asia", parallel)) as asia,
    ):
        assert eu.add(module.Probe(who="eu"))
        assert asia.add(module.Probe(who="asia"))
    assert sorted(module.seen) == [("asia", "asia"), ("eu", "eu")]


@pytest.mark.parametrize("executor", ["inline", "thread", "fork", "subprocess"])
def test_dynamic_dependencies_take_the_running_workers_defaults(
    task_module: WriteModule, tmp_path: Path, executor: str
) -> None:
    """A task run() yields is made where run() runs (the worker's thread, a pool thread or
    an attempt's process) and again by the worker (for a process executor, on the thread that
    reads the attempt's messages): both take the defaults of the worker running it, its task
    id style included, for two workers alive at once."""
    module = __import__(task_module(TASKS))
    workers_n = 1 if executor == "inline" else 2
    chosen = f'[worker]\nexecutor = "{executor}"\nworkers = {workers_n}\ntask_id_style = "luigi"\n'
    dirs = {region: tmp_path / f"{region}-out" for region in ("eu", "asia")}
    workers = {r: conveyor.Worker(config=_region_config(tmp_path, r, chosen)) for r in dirs}
    try:
        for region, worker in workers.items():
            dirs[region].mkdir()
            assert worker.add(module.Dynamic(out=str(dirs[region])))
        assert all(worker.run() for worker in workers.values())
    finally:
        for worker in reversed(workers.values()):
            worker.close()
    for region, out in dirs.items():
        assert (out / "dynamic").read_text() == str(out / f"leaf-{region}")


def test_a_worker_leaves_the_process_defaults_and_other_threads_alone(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """While a Worker lives, another thread still makes tasks with the process's defaults,
    and the process's defaults in use are unchanged."""
    module = __import__(task_module(TASKS))
    use_task_defaults({"Leaf": {"region": "moon"}})
    before = task_defaults_in_use()
    elsewhere: list[str] = []
    with conveyor.Worker(config=_region_config(tmp_path, "eu")):
        assert module.Leaf(out="-").region == "eu"
        thread = threading.Thread(target=lambda: elsewhere.append(module.Leaf(out="-").region))
        thread.start()
        thread.join(timeout=30)
    assert elsewhere == ["moon"]
    assert task_defaults_in_use() == before
    assert module.Leaf(out="-").region == "moon"


def test_task_defaults_applied_in_a_block_only(task_module: WriteModule) -> None:
    """``TaskDefaults.applied()`` is the seam a Worker uses: inside the block tasks take its
    tables (and the same keyword arguments make a different task than outside it)."""
    module = __import__(task_module(TASKS))
    defaults = TaskDefaults({"Leaf": {"region": "eu"}}, {"Leaf": "test"})
    outside = module.Leaf(out="-")
    with defaults.applied():
        inside = module.Leaf(out="-")
        assert task_defaults_in_use() == ({"Leaf": {"region": "eu"}}, {"Leaf": "test"}, "conveyor")
    assert (outside.region, inside.region, module.Leaf(out="-").region) == ("us", "eu", "us")
    assert inside.task_id != outside.task_id


def test_workers_closed_out_of_order_leave_only_their_own_defaults(
    task_module: WriteModule, tmp_path: Path
) -> None:
    """Two Workers made in one thread and closed in the order they were made: while the later
    one lives its defaults apply, once both are closed the process's apply again (the earlier
    one's never come back), and closing twice changes nothing."""
    module = __import__(task_module(TASKS))
    use_task_defaults({"Leaf": {"region": "moon"}})
    eu = conveyor.Worker(config=_region_config(tmp_path, "eu"))
    asia = conveyor.Worker(config=_region_config(tmp_path, "asia"))
    try:
        assert module.Leaf(out="-").region == "asia"
        eu.close()
        assert module.Leaf(out="-").region == "asia"
        eu.close()
        assert module.Leaf(out="-").region == "asia"
    finally:
        asia.close()
        eu.close()
    assert module.Leaf(out="-").region == "moon"
