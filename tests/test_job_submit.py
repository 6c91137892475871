"""The local jobs as jobs/README.md runs them: a head started by `ray start` from this venv, the
shipped fill-local.yaml and train-local.yaml sent with `ray job submit --working-dir .`, then
`raycache ls` and `raycache runs` find the cache and the run in $RAYCACHE_STORE; Ctrl-C (SIGINT)
to that `ray start` stops that head and nothing else."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import FAST_TRAIN_POLL, ROOT, free_port
from tests.test_cluster import AGENT_PORTS, RAY, job_server_up, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

SUBMIT = [RAY, "job", "submit", "--working-dir", ".", "--runtime-env", "jobs/runtime_env.yaml",
          "--"]
RAY_LINES = ("Reporting training result", "TrainingReport(")  # Ray Train, per report


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """`ray start --head --block` as the README has it: the venv first on PATH, token auth, the
    store and data folders exported; its own ports and temp dir, in a session of its own."""
    home = tmp_path_factory.mktemp("jobs")
    temp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths have a limit
    port, dash = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env.update({
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
        "RAYCACHE_DATA": str(home / "data"), "RAYCACHE_STORE": str(home / "store"),
        "RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{dash}", "RAY_USAGE_STATS_ENABLED": "0",
        **FAST_TRAIN_POLL,
    })
    log = open(Path(temp) / "ray-start.log", "wb")  # noqa: SIM115 (closed in teardown)
    proc = subprocess.Popen(
        [RAY, "start", "--head", "--block", f"--port={port}", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dash}", f"--temp-dir={temp}", "--node-ip-address=127.0.0.1",
         "--num-cpus=2", "--disable-usage-stats",
         *(f"--{name}={free_port()}" for name in AGENT_PORTS)],
        env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: job_server_up(env["RAY_API_SERVER_ADDRESS"]), "the head's job server",
                 poll=0.2)
        hello = [RAY, "job", "submit", "--", "python", "-c", "print('up')"]
        wait_for(lambda: subprocess.run(hello, env=env, capture_output=True, timeout=120)
                 .returncode == 0, "a job agent to take jobs")
        yield {"env": env, "home": home, "temp": temp}
    finally:
        left = stop(proc)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
    assert not left, f"Ctrl-C to `ray start --block` left processes {left} running"


def stop(proc: subprocess.Popen) -> list[int]:
    """Ctrl-C to the `ray start` process alone, as the README says; the processes of its session
    still running after it (killed then), if any."""
    proc.send_signal(signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=90)
    deadline = time.monotonic() + 30
    while (left := session_pids(proc.pid)) and time.monotonic() < deadline:
        time.sleep(1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return left


def session_pids(sid: int) -> list[int]:
    """The processes of session `sid` still alive (zombies left out)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
    return out


def run(cmd: list[str], head: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=ROOT, env=head["env"], capture_output=True, text=True,
                          timeout=timeout)
    done.out = done.stdout + done.stderr  # type: ignore[attr-defined]
    return done


def test_local_fill_and_train_jobs_as_the_readme_runs_them(head):
    data = Path(head["env"]["RAYCACHE_DATA"], "stdlib-docs.parquet")
    made = run([sys.executable, "-m", "raycache._source.demo_data", str(data), "10"], head)
    assert made.returncode == 0, made.out

    fill = run([*SUBMIT, "python", "jobs/fill.py", "--config", "jobs/configs/fill-local.yaml"],
               head)
    assert fill.returncode == 0, fill.out
    assert "miss, 60 rows (60 encoded, 0 reused)" in fill.stdout, fill.out
    train = run([*SUBMIT, "python", "jobs/train.py", "--config",
                 "jobs/configs/train-local.yaml"], head)
    assert train.returncode == 0, train.out
    assert "train linear on stdlib-docs/" in train.stdout, train.out
    for line in RAY_LINES:  # progress on: workers' output reaches the job log
        assert line not in fill.out + train.out, line
    # Ray Core's line for Ray Train's preemption watcher actor (raycache turns the watcher off)
    assert "has constructor arguments in the object store" not in train.out, train.out

    store = Path(head["env"]["RAYCACHE_STORE"])
    [manifest] = store.glob("stdlib-docs/*/manifest.json")
    fingerprint = json.loads(manifest.read_text())["fingerprint"]
    assert list(manifest.parent.glob("runs/*/checkpoint_*/head.safetensors"))
    # nothing of it went into Ray's temporary copy of the checkout
    assert not list(Path(head["temp"]).glob("session_*/runtime_resources/**/.raycache"))

    listed = run([sys.executable, "-m", "raycache", "ls"], head)
    assert listed.returncode == 0, listed.out
    assert f"stdlib-docs/{fingerprint}  rows=60" in listed.stdout
    runs = run([sys.executable, "-m", "raycache", "runs", "stdlib-docs"], head)
    assert runs.returncode == 0, runs.out
    assert "finished" in runs.stdout, runs.out


def test_a_relative_store_is_refused_in_a_job(head):
    env = yaml.safe_load((ROOT / "jobs" / "runtime_env.yaml").read_text())
    env["env_vars"]["RAYCACHE_STORE"] = ".raycache/store"  # the default: relative
    done = run([RAY, "job", "submit", "--runtime-env-json", json.dumps(env), "--", "python",
                "jobs/fill.py", "--config", "jobs/configs/fill-local.yaml"], head)
    assert done.returncode != 0
    assert ("raycache fill: error: store '.raycache/store' is a relative path, and this Ray job "
            "runs in Ray's temporary copy of its working_dir") in done.out, done.out
    assert "export RAYCACHE_STORE=/path/to/store where `ray start` runs" in done.out
