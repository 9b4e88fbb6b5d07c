"""Group commits (edge/agent/commits.py, Outbox.group): the chunks queued while the disk is
busy are committed together, all or none, in order, at most ``depth`` ahead of the disk;
a failed group is raised to the agent and nothing queued after it is written."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from edge.agent.commits import Commits
from edge.agent.outbox import Outbox


def _pending(ob: Outbox) -> list[str]:
    return ob.pending_ids()


def test_a_group_of_puts_commits_all_or_none(tmp_path):
    ob = Outbox(tmp_path / "outbox.db")
    with pytest.raises(RuntimeError):
        with ob.group():
            ob.put(b"one", "b1", state={"consumed": 1})
            ob.put(b"two", "b2", state={"consumed": 2})
            raise RuntimeError("killed before the commit")
    assert _pending(ob) == [] and "consumed" not in ob.load_state()
    with ob.group():
        ob.put(b"one", "b1", state={"consumed": 1})
        ob.save_state({"consumed": 2})
        ob.put(b"two", "b2", state={"consumed": 3})
    assert _pending(ob) == ["b1", "b2"] and ob.load_state()["consumed"] == 3
    reopened = Outbox(tmp_path / "outbox.db")
    assert _pending(reopened) == ["b1", "b2"] and reopened.load_state()["consumed"] == 3


def test_another_thread_waits_for_the_group(tmp_path):
    ob = Outbox(tmp_path / "outbox.db")
    seen = []
    with ob.group():
        ob.put(b"one", "b1")
        other = threading.Thread(target=lambda: seen.append(ob.ack("b1")))
        other.start()
        time.sleep(0.2)
        assert other.is_alive()  # the uploader's ack waits for the group's commit
        ob.put(b"two", "b2")
    other.join(5)
    assert seen == [True] and _pending(ob) == ["b2"]


class _Disk:
    """A writer whose groups wait for ``go`` (a slow fsync), recorded in order."""

    def __init__(self, fail_on=None, full_times: int = 0):
        self.go, self.started = threading.Event(), threading.Event()
        self.groups: list[list] = []
        self.fail_on, self.full_times = fail_on, full_times

    def write(self, items: list) -> None:
        self.started.set()
        assert self.go.wait(10)
        if self.full_times:
            self.full_times -= 1
            raise sqlite3.OperationalError("database or disk is full")
        if self.fail_on in items:
            raise ValueError(f"cannot write {self.fail_on}")
        self.groups.append(list(items))


def test_writes_queued_while_the_disk_is_busy_commit_as_one_group_in_order():
    disk = _Disk()
    commits = Commits(threading.Event(), disk.write, depth=8)
    commits.submit(0)
    assert disk.started.wait(5)
    for i in range(1, 6):
        commits.submit(i)
    disk.go.set()
    commits.wait()
    commits.close()
    assert disk.groups == [[(0,)], [(i,) for i in range(1, 6)]]


def test_the_agent_waits_once_depth_chunks_are_queued():
    disk = _Disk()
    commits = Commits(threading.Event(), disk.write, depth=2)
    commits.submit("busy")
    assert disk.started.wait(5)
    commits.submit(1)
    commits.submit(2)
    third = threading.Thread(target=commits.submit, args=(3,))
    third.start()
    time.sleep(0.2)
    assert third.is_alive()  # two queued behind the slow write: the third waits
    disk.go.set()
    third.join(5)
    commits.close()
    assert [item for group in disk.groups for item in group] == [("busy",), (1,), (2,), (3,)]


def test_a_failed_group_is_raised_and_nothing_queued_after_it_is_written():
    disk = _Disk(fail_on=("bad",))
    commits = Commits(threading.Event(), disk.write, depth=8)
    commits.submit("bad")
    assert disk.started.wait(5)
    commits.submit("after")
    disk.go.set()
    with pytest.raises(ValueError, match="cannot write"):
        commits.wait()
    commits.close()
    assert disk.groups == []


def test_a_full_disk_retries_the_whole_group_until_it_commits():
    disk = _Disk(full_times=2)
    disk.go.set()
    commits = Commits(threading.Event(), disk.write, retry=0.01)
    commits.submit(1)
    commits.wait()
    commits.close()
    assert disk.groups == [[(1,)]] and not commits.disk_full


def test_a_stop_while_the_disk_is_full_gives_up_every_group_after_it():
    disk = _Disk(full_times=1000)
    disk.go.set()
    stop = threading.Event()
    commits = Commits(stop, disk.write, retry=0.01)
    commits.submit(1)
    deadline = time.monotonic() + 5
    while not commits.disk_full and time.monotonic() < deadline:
        time.sleep(0.01)
    assert commits.disk_full
    stop.set()
    commits.wait()  # given up at a stop: not an error, never committed
    disk.full_times = 0
    commits.submit(2)
    commits.close()
    assert disk.groups == []


def test_a_closed_writer_refuses_more_writes():
    commits = Commits(threading.Event(), lambda items: None)
    commits.close()
    with pytest.raises(RuntimeError, match="closed"):
        commits.submit(1)
