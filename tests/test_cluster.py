"""A real 2-node Ray cluster on 127.0.0.1 (`ray start`), jobs sent with the real `ray job submit`,
a moto S3 store shared by every node: fill tasks and train workers land on different nodes."""

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
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import s3fs
import yaml

from tests.conftest import FAST_TRAIN_POLL, ROOT, TESTS, free_port, listening, separable, toy_fill

pytestmark = [pytest.mark.ray, pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(1200)]
RAY = str(Path(sys.executable).parent / "ray")
# Per-node agent ports: Ray's fixed defaults clash with any other Ray on the machine (such as
# the in-process one of the other tests), and then no job agent ever comes up.
AGENT_PORTS = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
               "metrics-export-port", "runtime-env-agent-port", "ray-client-server-port")


def wait_for(check, what: str, seconds: float = 180, poll: float = 1) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError):  # not up yet: refused, or not answering in JSON yet
            pass
        time.sleep(poll)
    raise TimeoutError(f"gave up after {seconds} s waiting for {what}")


@pytest.fixture(scope="module")
def cluster(s3_endpoint):
    """Head and one worker node, each with 2 logical CPUs, in their own process groups."""
    temp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths have a limit
    port, dash = free_port(), free_port()
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    env = {**os.environ, **auth, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(TESTS), "RAY_ADDRESS": "", **FAST_TRAIN_POLL,
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=2", "--disable-usage-stats"]
    own_ports = [f"--{name}={free_port()}" for name in AGENT_PORTS]
    log = open(Path(temp) / "ray-start.log", "wb")  # noqa: SIM115 (closed in teardown)
    procs = [subprocess.Popen(
        [RAY, "start", "--head", f"--port={port}", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dash}", "--include-dashboard=true", f"--temp-dir={temp}", *common,
         *own_ports],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)]
    api = f"http://127.0.0.1:{dash}"
    try:  # the second node joins as soon as the head's GCS listens, while the head starts up
        wait_for(lambda: listening(port), "the head's GCS port", poll=0.1)
        procs.append(subprocess.Popen(
            [RAY, "start", f"--address=127.0.0.1:{port}", *common,
             *(f"--{name}={free_port()}" for name in AGENT_PORTS)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        wait_for(lambda: job_server_up(api), "the head's job server", poll=0.2)
        wait_for(lambda: len(ray_list("nodes", api, env, "--filter", "state=ALIVE")) == 2,
                 "the second node")
        hello = [RAY, "job", "submit", "--address", api, "--", "python", "-c", "print('up')"]
        wait_for(lambda: subprocess.run(hello, env=env, capture_output=True, timeout=120)
                 .returncode == 0, "a job agent to take jobs")
    except TimeoutError as err:  # what the nodes printed is what tells why
        log.flush()
        said = (Path(temp) / "ray-start.log").read_text(errors="replace")[-4000:]
        raise TimeoutError(f"{err}; ray start printed:\n{said}") from err
    else:
        yield {"api": api, "env": env}
    finally:
        for p in reversed(procs):
            with_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 2  # one short graceful stop for both nodes at once,
        for p in reversed(procs):  # then each group killed: a node's processes hold nothing
            try:  # the next test needs
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                with_group(p, signal.SIGKILL)
                p.wait(timeout=30)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def with_group(p: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, sig)


def job_server_up(api: str) -> bool:
    """The job server answers (401 included: Ray's token auth is on by default)."""
    try:
        urllib.request.urlopen(f"{api}/api/version", timeout=5)
    except urllib.error.HTTPError as err:
        return err.code == 401
    return True


def ray_list(what: str, api: str, env: dict, *args: str) -> list[dict]:
    """`ray list ...` against the cluster, with its token, as JSON."""
    out = subprocess.run([RAY, "list", what, "--address", api, "--format", "json", *args],
                         env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise OSError(out.stderr)
    return json.loads(out.stdout)


def submit(cluster: dict, config: Path, job: str) -> subprocess.CompletedProcess:
    """`ray job submit` exactly as a user types it; waits for the job and returns its log."""
    return subprocess.run(
        [RAY, "job", "submit", "--address", cluster["api"], "--runtime-env",
         "jobs/runtime_env.yaml", "--", "python", f"jobs/{job}.py", "--config", str(config),
         "--no-progress"],
        cwd=ROOT, env=cluster["env"], capture_output=True, text=True, timeout=900)


def task_nodes(cluster: dict, name_part: str) -> set[str]:
    tasks = ray_list("tasks", cluster["api"], cluster["env"], "--detail", "--limit", "10000")
    return {t["node_id"] for t in tasks if name_part in t["name"] and t.get("node_id")}


def actor_nodes(cluster: dict, class_part: str) -> set[str]:
    actors = ray_list("actors", cluster["api"], cluster["env"], "--detail", "--limit", "1000")
    return {a["node_id"] for a in actors if class_part in a["class_name"]}


def test_jobs_on_two_nodes_share_one_s3_store(cluster, bucket, tmp_path):
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    data = separable(n=400)
    for i in range(2):
        with fs.open(f"{bucket}/data/part-{i}.parquet", "wb") as f:
            pq.write_table(data.slice(i * 200, 200), f)
    store = f"{bucket}/caches"
    fill_cfg = toy_fill(f"{bucket}/data/", store, rows_per_shard=50, concurrency=2,
                        num_cpus=0.75)  # 2 CPUs a node: one encoder actor per node
    (tmp_path / "fill.yaml").write_text(yaml.safe_dump(fill_cfg))
    done = submit(cluster, tmp_path / "fill.yaml", "fill")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "miss, 400 rows (400 encoded, 0 reused), 8 shards" in done.stdout
    [manifest] = fs.glob(f"{store}/toy/*/manifest.json")
    committed = json.loads(fs.cat(manifest))
    listed = json.loads(fs.cat(manifest.rsplit("/", 1)[0] + "/" + committed["shard_list"]["path"]))
    assert sum(s["rows"] for s in listed) == committed["totals"]["rows"] == 400
    assert len(task_nodes(cluster, "chain_task")) == 2  # CPU encoder tasks, on both nodes

    (tmp_path / "train.yaml").write_text(yaml.safe_dump({
        "cache": "toy", "store": {"uri": store}, "epochs": 2, "lr": 0.05, "batch_size": 32,
        "num_workers": 2, "cpus_per_worker": 1.5, "placement": "cpu", "run_name": "job"}))
    done = submit(cluster, tmp_path / "train.yaml", "train")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trained epochs 1-2 of 2" in done.stdout and "checkpoint s3://" in done.stdout
    assert "epoch 2/2" not in done.stdout  # --no-progress: no epoch lines, the summary alone
    fp = committed["fingerprint"]
    assert fs.glob(f"{store}/toy/{fp}/runs/job/checkpoint_*/head.safetensors")
    assert len(actor_nodes(cluster, "RayTrainWorker")) == 2


def test_broken_config_makes_ray_job_submit_fail(cluster, tmp_path):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"cache": "toy", "epoch": 3}))
    done = submit(cluster, tmp_path / "bad.yaml", "train")
    assert done.returncode != 0
    assert "- epoch: unknown field" in done.stdout + done.stderr


def test_local_folder_store_is_refused_on_a_multi_node_cluster(cluster, tmp_path):
    pq.write_table(separable(n=20), tmp_path / "a.parquet")
    cfg = toy_fill(str(tmp_path / "a.parquet"), str(tmp_path / "store"))
    (tmp_path / "fill.yaml").write_text(yaml.safe_dump(cfg))
    done = submit(cluster, tmp_path / "fill.yaml", "fill")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "is a local folder, but this Ray cluster has 2 nodes" in out
    assert "use object storage" in out
    assert not list((tmp_path / "store").rglob("manifest.json"))
