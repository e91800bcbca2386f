"""ops/checks.py: what a user sees when the kernels cannot run on their tensors."""

import re

import pytest
import torch

from tests.commands import last_line, run_python
from vllm_sampling_plugin import ops
from vllm_sampling_plugin.ops import checks

CPU_TENSORS_ERROR = (
    "is on the CPU, but the kernels were compiled for the GPU: pass CUDA tensors, or set "
    "TRITON_INTERPRET=1 in the environment before Python imports vllm_sampling_plugin.ops "
    "to run them on the CPU (slow)"
)


@pytest.mark.parametrize(
    "after_import",
    ["", "import os; os.environ['TRITON_INTERPRET'] = '1'  # too late: kernels are made"],
    ids=["interpreter-off", "interpreter-set-after-import"],
)
def test_cpu_tensors_without_the_interpreter_fail_in_one_line(after_import):
    proc = run_python(
        f"""
        import torch
        from vllm_sampling_plugin import ops
        {after_import}
        ops.sample(torch.randn(2, 8), torch.ones(2), torch.tensor([1, 2]), torch.tensor([0, 0]))
        """,
        env={"TRITON_INTERPRET": None},
    )
    assert proc.returncode == 1
    assert last_line(proc.stderr) == f"ValueError: logits {CPU_TENSORS_ERROR}"


def test_every_public_op_checks_before_launching(monkeypatch):
    # As if the kernels had been compiled for the GPU: the check must fire
    # before any of them is launched.
    monkeypatch.setattr(checks, "KERNELS_INTERPRETED", False)
    with pytest.raises(ValueError, match="^target_logits " + re.escape(CPU_TENSORS_ERROR)):
        ops.rejection_sample(torch.zeros(1, 2, 8), torch.zeros(1, 1, dtype=torch.int64), None,
                             torch.ones(1), torch.zeros(1, dtype=torch.int64),
                             torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="^token_ids " + re.escape(CPU_TENSORS_ERROR)):
        ops.ngram_propose(torch.tensor([[1, 2, 1, 2]]), torch.tensor([4]), min_n=1, max_n=2, k=2)
