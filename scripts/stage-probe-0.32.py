#!/usr/bin/env python3
"""Checks an exclusion list of scripts/stage-vllm-newer.sh on a machine without
a GPU: imports vLLM's dense serving path twice, from a view of a venv's
site-packages with every package and from one without the named
distributions, and prints what differs.

Both views are symlink farms put on PYTHONPATH under `python -S`, as the GPU
machine sees /tmp/vllm-site (so .pth files are not read there either); a
distribution is left out with every file its RECORD names, metadata included.

    python3 scripts/stage-probe-0.32.py --venv /work/venv-032 tokenspeed-mla quack-kernels ...

The venv must hold vLLM 0.32 (a CPU torch will do) and the project; nothing
in it is changed. Exit status 1 when the reduced view fails an import that the
full one passes.
"""
import argparse
import csv
import json
import os
import pathlib
import subprocess
import sys
import tempfile

# Imported in the child: every module of the dense-model path, packages walked.
PROBE = r'''
import importlib, importlib.metadata as md, json, pkgutil, sys
single = [
    "vllm", "vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve", "vllm.entrypoints.llm", "vllm.engine.arg_utils",
    "vllm.v1.engine.core", "vllm.v1.engine.async_llm", "vllm.v1.engine.llm_engine",
    "vllm.v1.executor.uniproc_executor", "vllm.v1.executor.multiproc_executor",
    "vllm.v1.worker.gpu_worker", "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.attention.backends.flash_attn", "vllm.v1.attention.backends.triton_attn",
    "vllm.v1.attention.backends.flashinfer", "vllm.v1.attention.selector",
    "vllm.v1.spec_decode.ngram_proposer", "vllm.v1.spec_decode.ngram_proposer_gpu",
    "vllm.model_executor.models.llama", "vllm.model_executor.models.registry",
    "vllm.model_executor.model_loader.default_loader",
    "vllm.model_executor.model_loader.weight_utils",
    "vllm.model_executor.layers.linear", "vllm.model_executor.layers.layernorm",
    "vllm.model_executor.layers.rotary_embedding",
    "vllm.model_executor.layers.logits_processor",
    "vllm.model_executor.layers.vocab_parallel_embedding",
    "vllm.model_executor.layers.activation", "vllm.model_executor.layers.quantization",
    "vllm.compilation.backends", "vllm.compilation.decorators", "vllm.multimodal",
    "vllm.tokenizers", "vllm.v1.structured_output", "vllm.distributed.parallel_state",
    "vllm.distributed.device_communicators.pynccl", "vllm.platforms.cuda",
    "vllm.utils.flashinfer",
]
walk = ["vllm.v1.worker.gpu", "vllm.v1.sample", "vllm.entrypoints.openai",
        "vllm.entrypoints.serve", "vllm_sampling_plugin"]
failed, ok = {}, []
def imp(m):
    try:
        importlib.import_module(m)
        ok.append(m)
    except BaseException as e:
        failed[m] = f"{type(e).__name__}: {str(e)[:200]}"
for m in single:
    imp(m)
for p in walk:
    imp(p)
    mod = sys.modules.get(p)
    for info in pkgutil.walk_packages(getattr(mod, "__path__", []), p + "."):
        imp(info.name)
try:
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    ok.append("load_general_plugins")
except BaseException as e:
    failed["load_general_plugins"] = f"{type(e).__name__}: {e}"
top = {k.split(".")[0] for k in sys.modules}
p2d = md.packages_distributions()
dists = sorted({d for t in top for d in p2d.get(t, [])})
print("PROBE " + json.dumps({"ok": ok, "failed": failed, "dists": dists}))
'''


def farm(site, out, drops):
    """Symlink view of `site` without the files of the distributions `drops`."""
    from packaging.utils import canonicalize_name as cn
    from importlib.metadata import PathDistribution
    gone, found = set(), set()
    for entry in os.scandir(site):
        if not entry.name.endswith(".dist-info"):
            continue
        name = cn(PathDistribution(pathlib.Path(entry.path)).metadata["Name"])
        if name in drops:
            found.add(name)
            with open(os.path.join(entry.path, "RECORD")) as f:
                gone.update(os.path.normpath(os.path.join(site, row[0])) for row in csv.reader(f) if row)
            gone.add(os.path.normpath(entry.path))
    partial = set()
    for p in gone:
        q = os.path.dirname(p)
        while len(q) > len(site):
            partial.add(q)
            q = os.path.dirname(q)

    def mirror(src, dst):
        os.makedirs(dst, exist_ok=True)
        for e in os.scandir(src):
            s = os.path.normpath(e.path)
            if s in gone:
                continue
            if s in partial and e.is_dir(follow_symlinks=False):
                mirror(s, os.path.join(dst, e.name))
            else:
                os.symlink(s, os.path.join(dst, e.name))

    mirror(site, out)
    # A directory left empty would still import, as a namespace package.
    for d, _, _ in os.walk(out, topdown=False):
        if d != out and not os.listdir(d):
            os.rmdir(d)
    return sorted(set(drops) - found)


def run(python, view, project):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([project, view]))
    env.pop("PYTHONHOME", None)
    out = subprocess.run([python, "-S", "-c", PROBE], env=env, cwd=tempfile.gettempdir(),
                         capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[6:])
    sys.exit(f"probe failed to run:\n{out.stderr[-3000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", required=True, help="a venv with vLLM 0.32 and the project")
    ap.add_argument("--project", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("drop", nargs="+", help="distributions to leave out")
    args = ap.parse_args()
    from packaging.utils import canonicalize_name as cn
    python = os.path.join(args.venv, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        full, less = os.path.join(tmp, "full"), os.path.join(tmp, "less")
        farm(site, full, set())
        absent = farm(site, less, {cn(d) for d in args.drop})
        a, b = run(python, full, args.project), run(python, less, args.project)
    if absent:
        print(f"not installed in the venv (absent in both views): {absent}")
    print(f"full view: {len(a['ok'])} imports pass, {len(a['failed'])} fail")
    print(f"without {len(args.drop)} distributions: {len(b['ok'])} pass, {len(b['failed'])} fail")
    for m, e in sorted(b["failed"].items()):
        print(f"  {'fails in both' if m in a['failed'] else 'NEW FAILURE'}: {m}: {e}")
    print(f"distributions no longer loaded: {sorted(set(a['dists']) - set(b['dists']))}")
    print(f"distributions loaded only without them: {sorted(set(b['dists']) - set(a['dists']))}")
    return 1 if set(b["failed"]) - set(a["failed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
