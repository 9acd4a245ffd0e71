"""A disk that fills, for real: a small tmpfs mounted in a private mount namespace (``unshare -rm``;
the test is skipped where the machine allows none), under a calibrate run and a calibrate fit.

* full at the start (the ranks' rendezvous file) or mid-run (the measurement file): one line, exit
  2, whole lines only (a CSV keeps its header, no part of a line), no rendezvous or temporary file;
  with space again the same command resumes to every point, the kept lines byte for byte first;
* ``calibrate fit`` on a full disk: one line, exit 2, no ``.tmp`` and the earlier profile.yaml as
  it was.
* without a tmpfs, a store whose third append the disk refuses (a one-rank run, in this process)
  ends the same way.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from laddersim.cli import main  # noqa: E402
from laddersim.measure.schema import SCHEMAS  # noqa: E402
from laddersim.measure.store import PointStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SIZES = "1KiB,4KiB,16KiB,64KiB"
RUN = ["calibrate", "run", "--backend", "gloo", "--world-size", "2", "--benchmarks", "allreduce", "--sizes", SIZES,
       "--dtypes", "float32", "--repeats", "3", "--warmup", "1"]
HEADER = ",".join(SCHEMAS["allreduce"].columns)
PAGE_BYTES = 4096  # tmpfs allocates a file's bytes a page at a time

# Runs inside the namespace: mounts the tmpfs, runs the steps of one scenario, copies what the disk
# held after each step out beside it (the tmpfs goes with the namespace), and writes each step's
# exit code and stderr to result.json.
DRIVER = textwrap.dedent('''
    import json, os, shutil, signal, subprocess, sys, time
    scenario, disk, host, run_args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    laddersim = [sys.executable, "-m", "laddersim"]
    results = {}

    def mount(size):
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", disk], check=True)

    def step(name, argv, during=None):
        proc = subprocess.Popen(laddersim + argv, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        if during:
            during(proc)
        out, err = proc.communicate(timeout=240)
        results[name] = {"rc": proc.returncode, "stderr": err, "stdout": out}
        shutil.copytree(disk, os.path.join(host, name), symlinks=True)

    def fill():
        fd = os.open(os.path.join(disk, "fill"), os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, bytes(4096)):
                pass
        except OSError:  # full
            pass
        finally:
            os.close(fd)

    def unfill():
        os.unlink(os.path.join(disk, "fill"))

    if scenario == "start":  # too small for the ranks' rendezvous file
        mount("8k")
        step("fault", run_args)
        subprocess.run(["mount", "-o", "remount,size=1m", disk], check=True)
        step("resume", run_args)
    elif scenario == "midrun":  # the disk fills once a point was stored: the next append is refused
        csv_path = os.path.join(disk, "run", "measurements", "allreduce.csv")
        seeded = int(sys.argv[5])
        caught = []

        def fill_after_a_point(proc):
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                with open(csv_path) as fh:
                    if fh.read().count("\\n") > 1 + seeded:  # the header, the earlier points, one more
                        break
                time.sleep(0.001)
            os.killpg(proc.pid, signal.SIGSTOP)  # no append while the disk fills
            with open(csv_path) as fh:
                caught.append(fh.read().count("\\n") == 2 + seeded)
            if caught[-1]:
                fill()
                os.killpg(proc.pid, signal.SIGCONT)
            else:  # a second point was stored before the stop (a loaded machine): start again
                os.killpg(proc.pid, signal.SIGKILL)

        for attempt in range(3):
            mount("1m")
            shutil.copytree(os.path.join(host, "seed"), os.path.join(disk, "run"))
            step("fault", run_args, fill_after_a_point)
            if caught[-1]:
                break
            subprocess.run(["umount", disk], check=True)
            shutil.rmtree(os.path.join(host, "fault"))
        unfill()
        step("resume", run_args)
    elif scenario == "fit":
        mount("1m")
        shutil.copytree(os.path.join(host, "seed"), os.path.join(disk, "run"))
        step("first", run_args + ["--name", "first"])
        fill()
        step("fault", run_args + ["--name", "second"])
    with open(os.path.join(host, "result.json"), "w") as fh:
        json.dump(results, fh)
''')


def in_namespace(tmp_path: Path, scenario: str, run_args: list[str], *extra: str) -> dict:
    """Run the DRIVER's ``scenario`` with its own tmpfs; its results (skips where no tmpfs can be mounted)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: cannot mount a private tmpfs")
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=8k tmpfs {tmp_path}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.strip()}")
    disk = tmp_path / "disk"
    disk.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run(["unshare", "-rm", sys.executable, str(driver), scenario, str(disk), str(tmp_path),
                    json.dumps(run_args), *extra], env=env, check=True, timeout=540)
    return json.loads((tmp_path / "result.json").read_text())


def the_error(result: dict) -> str:
    """The run's one ``error:`` line, which must also be its last, and no traceback."""
    lines = result["stderr"].splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result["stderr"]
    assert "Traceback" not in result["stderr"] and "Terminating process" not in result["stderr"]
    return errors[0]


def assert_no_debris(run: Path) -> None:
    """No rendezvous or temporary file, no measurement file without its header or ending mid-line."""
    names = [p.name for p in run.rglob("*")]
    assert not [n for n in names if n.startswith(".rendezvous-") or n.endswith(".tmp")], names
    for path in (run / "measurements").glob("*.csv"):
        text = path.read_text()
        header = ",".join(SCHEMAS[path.stem].columns)
        assert text.startswith(header + "\n") and text.endswith("\n"), (path, text[-80:])


def test_a_disk_full_at_the_start_is_one_line_and_resumes(tmp_path):
    result = in_namespace(tmp_path, "start", [*RUN, "--out", str(tmp_path / "disk" / "run")])
    fault, resume = result["fault"], result["resume"]
    assert fault["rc"] == 2
    assert the_error(fault).startswith("error: calibrate run: rank ")
    assert ": no space left on device creating the ranks' rendezvous file; the run was stopped and 0 of 4 points " \
           f"are kept in {tmp_path / 'disk' / 'run'}; free some space and re-run the same command to resume" \
           in the_error(fault)
    assert_no_debris(tmp_path / "fault" / "run")
    assert not list((tmp_path / "fault" / "run" / "measurements").iterdir())  # no empty CSV
    assert resume["rc"] == 0, resume["stderr"]
    assert_no_debris(tmp_path / "resume" / "run")
    assert len(PointStore(tmp_path / "resume" / "run" / "measurements" / "allreduce.csv",
                          SCHEMAS["allreduce"]).load()) == 4


def seed_points(path: Path) -> int:
    """Points of an earlier run (sizes this one does not measure) filling the file's first page but
    for 81 to 100 bytes: room for one more line of this run (60 to 80 bytes), not two. Their count."""
    line = "2,2,1,float32,eager,{},3,median,10,9,11,8,12\n"
    text, count = HEADER + "\n", 0
    while len(text) + len(line.format(8 + 4 * count)) <= PAGE_BYTES - 81:
        text += line.format(8 + 4 * count)
        count += 1
    extra = max(0, PAGE_BYTES - len(text) - 100)  # "12" -> "12.000": 100 bytes of room at most
    text = text[:-1] + ("." + "0" * (extra - 1) if extra else "") + "\n"
    assert 81 <= PAGE_BYTES - len(text) <= 100
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return count


def test_a_disk_that_fills_mid_run_is_one_line_keeps_whole_lines_and_resumes(tmp_path):
    seed = tmp_path / "seed"
    seeded = seed_points(seed / "measurements" / "allreduce.csv")
    run = tmp_path / "disk" / "run"
    result = in_namespace(tmp_path, "midrun", [*RUN, "--out", str(run)], str(seeded))
    fault, resume = result["fault"], result["resume"]
    assert fault["rc"] == 2, fault["stderr"]
    assert the_error(fault) == (
        f"error: calibrate run: rank 0: no space left on device writing {run}/measurements/allreduce.csv; the run "
        f"was stopped and 1 of 4 points are kept in {run}; free some space and re-run the same command to resume")
    kept = (tmp_path / "fault" / "run" / "measurements" / "allreduce.csv").read_text()
    assert kept.startswith((seed / "measurements" / "allreduce.csv").read_text())
    assert kept.count("\n") == 1 + seeded + 1  # the header, the earlier points, the one that fitted
    assert_no_debris(tmp_path / "fault" / "run")
    assert resume["rc"] == 0, resume["stderr"]
    assert "1 of 4 points already measured, resuming" in resume["stderr"]
    final = (tmp_path / "resume" / "run" / "measurements" / "allreduce.csv").read_text()
    assert final.startswith(kept) and final.count("\n") == kept.count("\n") + 3
    assert_no_debris(tmp_path / "resume" / "run")


def test_calibrate_fit_on_a_full_disk_is_one_line_and_keeps_the_earlier_profile(tmp_path):
    shutil.copytree(ROOT / "tests" / "data" / "calibration_compute_bound_gemms", tmp_path / "seed")
    run = tmp_path / "disk" / "run"
    result = in_namespace(tmp_path, "fit", ["calibrate", "fit", str(run)])
    assert result["first"]["rc"] == 0, result["first"]["stderr"]
    fault = result["fault"]
    assert fault["rc"] == 2 and fault["stdout"] == ""
    assert fault["stderr"] == (f"error: run: cannot write {run}/profile.yaml: No space left on device; no file is "
                               "left half-written and an earlier profile.yaml is kept as it was\n")
    earlier = (tmp_path / "first" / "run" / "profile.yaml").read_text()
    assert "first" in earlier.splitlines()[0]
    assert (tmp_path / "fault" / "run" / "profile.yaml").read_text() == earlier
    assert_no_debris(tmp_path / "fault" / "run")


def test_a_store_whose_third_append_the_disk_refuses_ends_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    """The same fault without a tmpfs: a one-rank run (in this process) of the memory benchmark,
    the store's third append refused as a full disk refuses it (``PointStore.append`` undoes its
    part and raises, ``tests/test_calibrate_store.py``)."""
    real, calls = PointStore.append, []

    def append(self, row):
        calls.append(row)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        real(self, row)

    monkeypatch.setattr(PointStore, "append", append)
    out = tmp_path / "run"
    one_rank = ["calibrate", "run", "--backend", "gloo", "--world-size", "1", "--benchmarks", "memory", "--quick",
                "--repeats", "1", "--warmup", "0", "--out", str(out)]
    assert main(one_rank) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1] == (f"error: calibrate run: rank 0: no space left on device writing {out}/measurements/"
                         f"memory.csv; the run was stopped and 2 of 6 points are kept in {out}; free some space "
                         "and re-run the same command to resume")
    assert len([line for line in lines if line.startswith("error:")]) == 1
    assert_no_debris(out)
    kept = (out / "measurements" / "memory.csv").read_text()
    monkeypatch.setattr(PointStore, "append", real)
    assert main(one_rank) == 0
    final = (out / "measurements" / "memory.csv").read_text()
    assert final.startswith(kept) and final.count("\n") == 1 + 6
