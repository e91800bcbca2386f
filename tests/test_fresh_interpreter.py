"""The tests' forked interpreters behave as ``python -c`` / ``python -m`` would."""

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests import fresh_interpreter
from tests.integration.helpers import REPO_ROOT


def run(argv, timeout=120, **extra_env):
    env = {**os.environ, **extra_env}
    for name, value in extra_env.items():
        if value is None:
            env.pop(name)
    return fresh_interpreter.run(argv, env=env, cwd=REPO_ROOT, timeout=timeout)


def test_a_child_has_neither_vllm_nor_the_plugin_imported_and_runs_as_main():
    proc = run([
        "-c",
        "import sys\n"
        "print(__name__, sys.argv)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'vllm', 'vllm_sampling_plugin'}))",
    ])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["__main__ ['-c']", "[]"]


def test_exit_status_streams_and_tracebacks_are_a_new_interpreters():
    proc = run(["-c", "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)"])
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")
    proc = run(["-c", "import sys\nsys.exit('a message')"])
    assert (proc.returncode, proc.stderr) == (1, "a message\n")
    proc = run(["-c", "raise ValueError('boom')"])
    assert proc.returncode == 1
    assert proc.stderr.startswith("Traceback (most recent call last):\n")
    assert proc.stderr.rstrip().endswith("ValueError: boom")
    assert "fresh_interpreter" not in proc.stderr and "exec(compile" not in proc.stderr


def test_the_environment_is_exactly_the_one_asked_for():
    code = "import os\nprint(os.environ.get('VLLM_PLUGINS'), os.environ.get('CUDA_VISIBLE_DEVICES'))"
    assert run(["-c", code], VLLM_PLUGINS="none", CUDA_VISIBLE_DEVICES="").stdout == "none \n"
    # Same zygote (these variables are applied in the child), other values.
    assert run(["-c", code], VLLM_PLUGINS=None, CUDA_VISIBLE_DEVICES=None).stdout == "None None\n"
    assert run(["-c", "import os\nprint(os.environ['OTHER_VAR'])"], OTHER_VAR="x").stdout == "x\n"


# Triton makes its own library's kernels interpreted or compiled on import.
STANDARD_KIND = "import triton.language.standard as s\nprint(type(s.cdiv).__name__)"


@pytest.mark.parametrize("interpret", [None, "1"])
def test_tritons_library_is_what_triton_interpret_makes_it(interpret):
    expected = "InterpretedFunction\n" if interpret else "JITFunction\n"
    assert run(["-c", STANDARD_KIND], TRITON_INTERPRET=interpret).stdout == expected
    # Set in the snippet before Triton's import, as docs/api.md's examples do.
    sets_it = f"import os\nos.environ['TRITON_INTERPRET'] = '1'\n{STANDARD_KIND}"
    assert run(["-c", sets_it], TRITON_INTERPRET=interpret).stdout == "InterpretedFunction\n"


def test_atexit_callbacks_and_non_daemon_threads_finish_before_the_exit():
    code = (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit'))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\n"
    )
    assert run(["-c", code]).stdout == "thread\natexit\n"


def test_a_module_runs_with_its_arguments():
    proc = run(["-m", "json.tool", "--help"])
    assert proc.returncode == 0
    assert "json.tool" in proc.stdout


def test_a_snippet_past_its_timeout_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        run(["-c", "print('started', flush=True)\nimport time\ntime.sleep(60)"], timeout=2)
    assert run(["-c", "print('next')"]).stdout == "next\n"


def test_a_snippet_that_sets_the_interpreter_already_on_is_forked():
    # The zygote has torch loaded; a plain new process has not, yet.
    code = "import os, sys\nos.environ['TRITON_INTERPRET'] = '1'\nprint('torch' in sys.modules)"
    assert run(["-c", code], TRITON_INTERPRET="1").stdout == "True\n"
    assert run(["-c", code], TRITON_INTERPRET=None).stdout == "False\n"


# A forked child has torch loaded from its start; a plain new process has not.
FORKED = "import sys\nprint('torch' in sys.modules)"


def test_snippets_asked_for_at_once_each_get_their_own_answer():
    # Two engines started side by side ask from two threads: the first is
    # forked, the one asked for while the zygote is busy gets a new process.
    slow = "import sys, time\nstarted = 'torch' in sys.modules\ntime.sleep(3)\nprint('slow', started)"
    quick = "import sys\nprint('quick', 'torch' in sys.modules)"
    assert run(["-c", FORKED]).stdout == "True\n"  # the zygote is up and idle
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(run, ["-c", slow])
        time.sleep(1)
        second = pool.submit(run, ["-c", quick])
        results = [first.result(), second.result()]
    assert [(proc.returncode, proc.stdout) for proc in results] == [
        (0, "slow True\n"), (0, "quick False\n")]


def test_a_zygote_whose_preloading_touched_cuda_forks_nothing(tmp_path, monkeypatch):
    # Where a preloaded library touches CUDA (a GPU machine), torch puts a
    # forked child "in bad fork": it and the engine processes it forks could
    # not use the GPU (H200, vLLM 0.33, 2026-11-29).
    (tmp_path / "starts_cuda.py").write_text(
        "import torch\n"
        "torch.cuda.device_count = lambda: 1\n"
        "torch.cuda._is_in_bad_fork = lambda: True\n")
    monkeypatch.setattr(fresh_interpreter, "_preload_list", lambda env, cwd: ["torch", "starts_cuda"])
    assert run(["-c", FORKED], PYTHONPATH=str(tmp_path)).stdout == "False\n"
    assert fresh_interpreter._zygote_for(
        {**os.environ, "PYTHONPATH": str(tmp_path)}, REPO_ROOT).cuda_touched
