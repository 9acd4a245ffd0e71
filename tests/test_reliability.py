"""Process lifetime, writer locks and listening sockets of the commands that start processes.

* SIGKILL of a ``sweep`` or ``calibrate run`` parent leaves no worker or rank alive 2 s later;
* a second writer on a locked run directory (sweep, calibrate run, ladder_bench --out) is one
  error line and exit 2;
* a local ``calibrate run`` listens on nothing outside 127.0.0.0/8 (its rendezvous is a
  FileStore in the run directory, its gloo sockets are bound to the loopback).
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laddersim.support.io_write import LOCK_FILE, check_output, lock_run_dir, run_dir_lock, unlock_run_dir
from laddersim.errors import UserInputError

ROOT = Path(__file__).resolve().parents[1]
TINY = {"num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
        "intermediate_size": 512, "vocab_size": 1000}
torch = pytest.importorskip("torch")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _start(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "laddersim", *args], cwd=cwd, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (from /proc), alive or zombie."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _kill_parent_and_check(proc: subprocess.Popen, children: set[int]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(2.0)
    alive = sorted(pid for pid in children if _alive(pid))
    for pid in alive:  # do not leave them running whatever the verdict
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"children alive 2 s after their parent was killed: {alive}"


@pytest.fixture
def tiny_model(tmp_path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def _sweep_args(model: Path, out: Path, workers: int = 2) -> list[str]:
    # 16,000 points: seconds of work even at issue 40's speed, so the sweep outlasts the start of
    # the commands these tests run beside it.
    return ["sweep", "--model", str(model), "--hardware", "h100-sxm-nvswitch", "--tp", "1", "2", "4", "8",
            "--batch", *map(str, range(1, 101)), "--prompt-len", "64", "--gen-len", "64", "--out", str(out),
            "--intra-bandwidth-scale", *map(str, range(1, 21)), "--workers", str(workers), "--no-progress"]


def test_sigkill_of_a_sweep_leaves_no_worker(tmp_path, tiny_model):
    out = tmp_path / "sweep"
    proc = _start(*_sweep_args(tiny_model, out), cwd=tmp_path)
    try:
        children = _wait_for(lambda: (kids := _children(proc.pid)) and len(kids) >= 2 and kids, 60, "sweep workers")
        _wait_for(lambda: (out / "points.jsonl").exists() and (out / "points.jsonl").stat().st_size, 60,
                  "the first stored point")
        children |= _children(proc.pid)
    finally:
        if proc.poll() is None:
            _kill_parent_and_check(proc, children)
        proc.stderr.close()


def test_a_second_sweep_on_a_locked_directory_is_one_line(tmp_path, tiny_model):
    out = tmp_path / "sweep"
    proc = _start(*_sweep_args(tiny_model, out, workers=1), cwd=tmp_path)
    try:
        _wait_for(lambda: (out / LOCK_FILE).exists() and (out / "grid.yaml").exists(), 60, "the sweep's lock")
        second = subprocess.run([sys.executable, "-m", "laddersim", *_sweep_args(tiny_model, out, workers=1)],
                                cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
        assert proc.poll() is None, "the first sweep ended before the second started; the test proves nothing"
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert second.returncode == 2
    assert second.stderr.count("\n") == 1 and "being written by another laddersim process" in second.stderr
    assert f"pid {proc.pid}" in second.stderr


def _calibrate_args(out: Path) -> list[str]:
    return ["calibrate", "run", "--backend", "gloo", "--world-size", "2", "--benchmarks", "allreduce",
            "--sizes", "1KiB,2KiB,4KiB,8KiB,16KiB,32KiB,64KiB", "--dtypes", "float32", "--repeats", "100000",
            "--warmup", "1", "--out", str(out)]


def _listening_sockets() -> dict[int, str]:
    """socket inode -> local address of every listening TCP socket (IPv4 and IPv6)."""
    found = {}
    for name, family in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 6)):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            hex_ip = fields[1].split(":")[0]
            raw = bytes.fromhex(hex_ip)
            # /proc prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found[int(fields[9])] = str(ipaddress.ip_address(raw))
    return found


def _socket_inodes(pids: set[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def test_local_calibrate_run_listens_only_on_loopback_and_dies_with_its_parent(tmp_path):
    out = tmp_path / "run"
    proc = _start(*_calibrate_args(out), cwd=tmp_path)
    try:
        # The ranks listen once their process group is up (gloo's pair sockets); sample them then.
        def ours_listening() -> dict[int, str]:
            ranks = _children(proc.pid)
            inodes = _socket_inodes(ranks | {proc.pid})
            return {inode: address for inode, address in _listening_sockets().items() if inode in inodes}

        listening = _wait_for(ours_listening, 180, "the ranks' sockets")
        for _ in range(5):
            listening.update(ours_listening())
            time.sleep(0.1)
        ranks = _children(proc.pid)
        second = subprocess.run([sys.executable, "-m", "laddersim", *_calibrate_args(out)], cwd=tmp_path,
                                env=_env(), capture_output=True, text=True, timeout=120)
        assert proc.poll() is None, "the run ended before the checks; the test proves nothing"
        assert len(ranks) >= 2
        _kill_parent_and_check(proc, ranks)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    exposed = {inode: address for inode, address in listening.items() if not _is_loopback(address)}
    assert not exposed, f"listening beyond the loopback: {exposed}"
    assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
    assert "being written by another laddersim process" in second.stderr


def test_ladder_bench_refuses_a_second_writer_of_its_csv(tmp_path):
    out = tmp_path / "bench.csv"
    lock_run_dir(tmp_path, "--out", f".{out.name}.lock", shown=out)
    try:
        model = tmp_path / "tiny.json"
        model.write_text(json.dumps(TINY))
        proc = subprocess.run([sys.executable, str(ROOT / "calibration" / "ladder_bench.py"), "--model", str(model),
                               "--world-size", "2", "--prompt-len", "8", "--gen-len", "2", "--out", str(out)],
                              env=_env(), capture_output=True, text=True, timeout=120)
    finally:
        unlock_run_dir(tmp_path, f".{out.name}.lock")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{out} is being written by another laddersim process (pid {os.getpid()})" in proc.stderr


def test_lock_is_released_with_the_block_and_refused_while_held(tmp_path):
    with run_dir_lock(tmp_path / "d"):
        child = subprocess.run([sys.executable, "-c", "from laddersim.support.io_write import lock_run_dir; "
                                f"lock_run_dir({str(tmp_path / 'd')!r})"], env=_env(), capture_output=True, text=True)
        assert child.returncode != 0 and "being written by another laddersim process" in child.stderr
    child = subprocess.run([sys.executable, "-c", "from laddersim.support.io_write import lock_run_dir; "
                            f"lock_run_dir({str(tmp_path / 'd')!r})"], env=_env(), capture_output=True, text=True)
    assert child.returncode == 0, child.stderr


@pytest.mark.parametrize("path, kind, message", [
    ("/proc/self/x", "dir", "under /proc"),
    ("/sys/kernel/x.md", "file", "under /sys"),
    ("FILE/sub", "dir", "is a file, not a directory"),
    ("FILE", "dir", "exists and is not a directory"),
    ("DIR", "file", "is a directory"),
])
def test_output_paths_are_checked_before_any_work(tmp_path, path, kind, message):
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "DIR").mkdir()
    target = path if path.startswith("/") else tmp_path / path
    with pytest.raises(UserInputError, match=message):
        check_output(target, "out", kind)
