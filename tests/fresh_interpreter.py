"""New interpreters for the tests, forked from one that has the libraries loaded.

Most integration tests run a snippet in a new interpreter, as vLLM's own
processes would, so that registration, entry points and import order are
those of a real process. Importing vLLM's V2 model runner takes about 20 s on
a CI core, and about 17 s of that is third-party code (torch, transformers,
scipy, openai, ...); vLLM's and the plugin's own modules take the rest.

``run`` therefore hands each snippet to a *zygote*: an interpreter that has
imported only the third-party modules vLLM imports directly (found once per
interpreter and vLLM release by ``python -X importtime``, and kept in the
temporary directory), and forks a child per snippet. The child has no
``vllm`` or ``vllm_sampling_plugin`` module yet, its ``os.environ`` is
exactly the environment asked for, and its
``__main__``, ``sys.argv``, exit status, stdout and stderr are those of
``python -c CODE`` or ``python -m MODULE ARGS``. What differs from a new
process is only that those third-party modules are already in
``sys.modules``.

Environment variables that no preloaded module reads at import (vLLM's
``VLLM_*``, read lazily through ``vllm.envs``; ``CUDA_VISIBLE_DEVICES``, read
when CUDA initialises) are applied in the child; a different value of any
other variable gets a zygote of its own (pytest's ``PYTEST_CURRENT_TEST``
aside). ``TRITON_INTERPRET`` is one of those others: Triton decorates its own
library's kernels (``triton.language.standard``) when it is imported, as
interpreted or compiled functions. For the same reason a snippet whose code
names ``TRITON_INTERPRET`` (it sets the variable before importing Triton, as
docs/api.md's examples do) runs in a plain new process,
unless all it does is set ``"1"`` where the environment already has it.
``PLUGIN_TESTS_NEW_PROCESSES=1`` runs every snippet in a plain new process
instead.

Two more cases run in a plain new process. A zygote whose preloading touched
CUDA (on a GPU machine, a library that calls ``torch.cuda.is_available()``
when imported is enough) cannot fork children that use it: torch refuses
with "Cannot re-initialize CUDA in forked subprocess", in the child and in
the engine processes vLLM forks from it (vLLM sees CUDA not initialised and
forks). And a zygote forks one child at a time, so a snippet asked for while
its zygote is busy (tests that start two engines at once, from two threads)
does not wait for it.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

NEW_PROCESSES_ENV = "PLUGIN_TESTS_NEW_PROCESSES"

# Read after import by everything the zygote preloads (see the module doc);
# pytest changes PYTEST_CURRENT_TEST with every test.
_CHILD_ONLY_PREFIXES = ("VLLM_",)
_CHILD_ONLY_NAMES = {"CUDA_VISIBLE_DEVICES", "PYTEST_CURRENT_TEST", NEW_PROCESSES_ENV}
# Set in a snippet's own code, it must precede Triton's import (module doc),
# unless the code only sets the value the zygote already had.
_IMPORT_TIME_IN_CODE = "TRITON_INTERPRET"
_SETS_INTERPRET_ON = re.compile(r"""os\.environ\[(["'])TRITON_INTERPRET\1\] = (["'])1\2""")


def _code_changes_triton_mode(code: str, env: dict[str, str]) -> bool:
    mentions = code.count(_IMPORT_TIME_IN_CODE)
    if mentions == 0:
        return False
    return env.get(_IMPORT_TIME_IN_CODE) != "1" or len(_SETS_INTERPRET_ON.findall(code)) != mentions


# What the probe imports: what the tests' snippets import first.
_PROBE = """
for name in ("vllm.config", "vllm.engine.arg_utils", "vllm.v1.worker.gpu.model_runner"):
    try:
        __import__(name)
    except Exception:
        pass
"""
_OWN_PACKAGES = {"vllm", "vllm_sampling_plugin", "tests", "__main__"}

# The zygote: preload, then one request per stdin line
# {"argv": [...], "env": {...}, "cwd": ..., "out": path, "err": path}; it
# answers "pid N" once the child runs and "rc N" when it ends.
_ZYGOTE = r"""
import atexit, importlib, json, os, runpy, sys, threading, types

for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except BaseException:
        pass


def exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def child(request):
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY),
                           (1, request["out"], os.O_WRONLY),
                           (2, request["err"], os.O_WRONLY)):
        opened = os.open(path, mode)
        os.dup2(opened, fd)
        os.close(opened)
    kind, target, *args = request["argv"]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    try:
        if kind == "-c":
            sys.argv = ["-c", *args]
            exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            sys.argv = [target, *args]
            sys.path[0] = os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as stop:
        status = exit_status(stop.code)
    except BaseException:
        kind, value, tb = sys.exc_info()
        sys.excepthook(kind, value, tb.tb_next)
        status = 1
    # What the interpreter does on its way out: join non-daemon threads,
    # run atexit callbacks (logging's flush among them), flush the streams.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)


# Whether a forked child could start CUDA: torch marks a child "in bad fork"
# once its parent has touched CUDA, which torch.cuda.is_available() already
# does (it asks the driver for the device count), and refuses to start CUDA
# there; only a child can tell. A machine without a GPU has none to refuse.
def forks_keep_cuda():
    torch = sys.modules.get("torch")
    if torch is None:
        return True
    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, wait_status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(wait_status) == 0 or torch.cuda.device_count() == 0


print(f"ready {int(not forks_keep_cuda())}", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    print(f"pid {pid}", flush=True)
    _, wait_status = os.waitpid(pid, 0)
    print(f"rc {os.waitstatus_to_exitcode(wait_status)}", flush=True)
"""


def _zygote_key(env: dict[str, str]) -> tuple:
    kept = {
        name: value
        for name, value in env.items()
        if not name.startswith(_CHILD_ONLY_PREFIXES) and name not in _CHILD_ONLY_NAMES
    }
    return (sys.executable, tuple(sorted(kept.items())))


def _preload_list(env: dict[str, str], cwd: Path) -> list[str]:
    """``_direct_imports``, kept on disk per interpreter and installed vLLM:
    CI runs several pytest sessions on one venv, the mutation check one per
    planted bug (each with its own ``PYTHONPATH``, which changes where the
    plugin comes from, not what vLLM imports)."""
    try:
        from importlib.metadata import version

        vllm_version = version("vllm")
    except Exception:
        vllm_version = None
    key = json.dumps([sys.executable, vllm_version])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    cache = Path(tempfile.gettempdir(), "vllm-sampling-plugin-tests", f"preload-{digest}.json")
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    modules = _direct_imports(env, cwd)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_suffix(f".{os.getpid()}")
    partial.write_text(json.dumps(modules))
    partial.replace(cache)
    return modules


def _direct_imports(env: dict[str, str], cwd: Path) -> list[str]:
    """The third-party modules vLLM's modules import directly, in order.

    From ``-X importtime``: each line is one import, nested ones indented
    deeper and listed before the module that imported them."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _PROBE],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=600,
    )
    imports = []  # (depth, name), innermost first
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or line.endswith("| imported package"):
            continue
        field = line.rsplit("|", 1)[1]
        name = field.strip()
        imports.append((len(field) - len(field.lstrip()), name))

    def own(name: str | None) -> bool:
        return name is not None and name.split(".")[0] in _OWN_PACKAGES

    roots = []
    for index, (depth, name) in enumerate(imports):
        importer = next((n for d, n in imports[index + 1:] if d < depth), None)
        if not own(name) and (importer is None or own(importer)) and name not in roots:
            roots.append(name)
    return roots


class _Zygote:
    def __init__(self, env: dict[str, str], cwd: Path, preload: list[str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE, json.dumps(preload)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env, cwd=cwd,
        )
        self.cuda_touched = bool(self._expect("ready", timeout=600))
        # Held while a child runs: the zygote answers one request at a time.
        self.busy = threading.Lock()

    def _expect(self, word: str, timeout: float) -> int:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(word)
        line = self.proc.stdout.readline()
        if not line.startswith(word):
            raise RuntimeError(f"zygote said {line!r}, expected {word!r}")
        return int(line.split()[1])

    def run(self, argv: list[str], env: dict[str, str], cwd: Path,
            timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(prefix="fresh-interpreter-") as scratch:
            out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
            out.touch()
            err.touch()
            request = {"argv": argv, "env": env, "cwd": str(cwd), "out": str(out), "err": str(err)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            started = time.monotonic()
            pid = self._expect("pid", timeout=60)
            try:
                returncode = self._expect("rc", timeout=max(1.0, timeout - (time.monotonic() - started)))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self._expect("rc", timeout=60)
                raise subprocess.TimeoutExpired(
                    [sys.executable, *argv], timeout, out.read_text(), err.read_text()
                ) from None
            return subprocess.CompletedProcess(
                [sys.executable, *argv], returncode, out.read_text(), err.read_text()
            )

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_zygotes: dict[tuple, _Zygote] = {}
_MAX_ZYGOTES = 4
# Threads asking for a zygote at once start one.
_zygotes_lock = threading.Lock()


def _close_all() -> None:
    for zygote in _zygotes.values():
        zygote.close()
    _zygotes.clear()


atexit.register(_close_all)


def _zygote_for(env: dict[str, str], cwd: Path) -> _Zygote:
    key = _zygote_key(env)
    with _zygotes_lock:
        zygote = _zygotes.get(key)
        if zygote is not None and zygote.proc.poll() is None:
            return zygote
        if len(_zygotes) >= _MAX_ZYGOTES:
            oldest = next(iter(_zygotes))
            _zygotes.pop(oldest).close()
        zygote = _zygotes[key] = _Zygote(env, cwd, _preload_list(env, cwd))
        return zygote


def run(argv: list[str], env: dict[str, str], cwd: Path,
        timeout: float) -> subprocess.CompletedProcess:
    """``python ARGV`` (``["-c", code]`` or ``["-m", module, *args]``) in a
    new interpreter with exactly ``env``; stdout and stderr captured as text,
    whatever the exit status; ``subprocess.TimeoutExpired`` past ``timeout``."""
    if argv[0] not in ("-c", "-m") or env.get(NEW_PROCESSES_ENV) == "1" \
            or os.environ.get(NEW_PROCESSES_ENV) == "1" \
            or (argv[0] == "-c" and _code_changes_triton_mode(argv[1], env)):
        return _new_process(argv, env, cwd, timeout)
    zygote = _zygote_for(env, cwd)
    if zygote.cuda_touched or not zygote.busy.acquire(blocking=False):
        return _new_process(argv, env, cwd, timeout)
    try:
        return zygote.run(argv, env, cwd, timeout)
    finally:
        zygote.busy.release()


def _new_process(argv: list[str], env: dict[str, str], cwd: Path,
                 timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)
