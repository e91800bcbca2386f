"""scripts/verification_dtype_check.py steps the plugin's verification op in
every case it times (float32 and bfloat16 logits, unfiltered and filtered,
n-gram drafts and draft logits); on CPU, under TRITON_INTERPRET=1, it times
nothing but must run each case and accept every draft, as the copy
workload it stands for does."""

import json
import os
import subprocess
import sys

from tests.scripts_dir import SCRIPTS


def test_every_case_runs_and_accepts_every_draft(tmp_path):
    out = tmp_path / "cases.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "verification_dtype_check.py"), "--device", "cpu",
         "--num-reqs", "2", "--k", "3", "--vocab", "300", "--iters", "1", "--out", str(out)],
        env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    cases = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(c["dtype"], c["filtered"], c["draft_logits"]) for c in cases} == {
        (dtype, filtered, draft)
        for dtype in ("float32", "bfloat16")
        for filtered in (False, True)
        for draft in (False, True)
    }
    assert all(c["rows"] == 8 and c["mean_accepted"] == 3.0 for c in cases)
