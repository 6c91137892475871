"""The guard before a model stage is built (raycache._compute.actor.whole_torch) where an
import of torch was cut short in the process (a task Ray cancelled mid-import): a Ray worker
leaves and its task runs again in a fresh one; the calling process gets an error naming the
cause."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

CUT_SHORT = """
import sys
import torch
from raycache._compute.actor import cut_short
assert not cut_short()  # a whole import
del sys.modules["torch"]  # what an import cut short leaves: its submodules, not torch
"""


def test_in_the_calling_process_it_is_an_error_naming_the_cause():
    code = CUT_SHORT + """
from raycache._compute.actor import whole_torch
from raycache._errors import EncoderError
assert cut_short()
try:
    whole_torch("model stage")
except EncoderError as e:
    print(e)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "an import of torch in this process" in done.stdout
    assert "cut short earlier" in done.stdout and "fresh Python process" in done.stdout


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_ray_worker_with_torch_cut_short_leaves_and_its_task_runs_again(ray_session, tmp_path):
    ray = ray_session
    marker = tmp_path / "first"

    @ray.remote(max_retries=2)
    def starts(marker: str) -> int:
        if not os.path.exists(marker):  # the first attempt: this worker's torch cut short
            Path(marker).write_text(str(os.getpid()))
            exec(CUT_SHORT)
        from raycache._compute.actor import whole_torch

        whole_torch("model stage")
        import torch  # noqa: F401  (whole, in the fresh worker)

        return os.getpid()

    pid = ray.get(starts.remote(str(marker)), timeout=240)
    assert marker.exists() and int(marker.read_text()) != pid  # run again, in another worker
