"""A bounded load run against an OpenAI-compatible ``vllm serve`` (issue #14).

``mix`` draws the requests (every sampling field, structured outputs, client
aborts, requests that must be refused), ``validate`` checks each answer,
``memory`` samples GPU and server host memory, ``summary`` counts and judges,
``run`` drives the load and ``command`` is ``python3 -m benchmarks soak``.
"""
