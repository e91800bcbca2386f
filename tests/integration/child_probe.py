"""Runs in a child process: what a vLLM worker does first, then a report."""


def report_runner_names(queue) -> None:
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    import vllm.v1.worker.gpu.model_runner as mr

    queue.put(f"{mr.Sampler.__name__} {mr.RejectionSampler.__name__}")
