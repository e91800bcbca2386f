"""agentic: coding-agent loops, one request per turn. Each turn's prompt carries
the tool schema, the task and the earlier turns' tool calls and outputs (real
directory listings, grep hits and file contents of the standard library); the
trace is the agent's next turn: notes quoting those outputs, then a JSON tool
call. Several sessions work on each task, so later requests repeat the calls,
outputs and notes of earlier ones: the cross-request repetition that a suffix
cache over earlier outputs can take."""

import json
import random
import re
from dataclasses import dataclass

from tokenizers import Tokenizer

from benchmarks.workloads.code_edit import check_lines, checkable_functions
from benchmarks.workloads.corpus import Corpus
from benchmarks.workloads.request import Lengths, Request, make_request

NAME = "agentic"
TOOLS = [
    {"name": "list_dir", "description": "List the files of a package.",
     "parameters": {"path": {"type": "string", "description": "A package folder."}}},
    {"name": "grep", "description": "Find the lines that mention a name, with their line numbers.",
     "parameters": {"pattern": {"type": "string", "description": "A word to look for."},
                    "path": {"type": "string", "description": "The package folder to search."}}},
    {"name": "read_file", "description": "Read a range of lines of a file.",
     "parameters": {"path": {"type": "string"}, "start": {"type": "integer"},
                    "end": {"type": "integer"}}},
    {"name": "edit_file", "description": "Replace one exact run of lines of a file by new lines.",
     "parameters": {"path": {"type": "string"}, "old": {"type": "string"},
                    "new": {"type": "string"}}},
    {"name": "run_tests", "description": "Run the tests of a package.",
     "parameters": {"path": {"type": "string"}}},
]
SYSTEM = ("<|system|>You are a coding agent working in the CPython standard library. Each turn, "
          "write short notes on what you have learned, then call exactly one tool with a JSON "
          'object {"tool": NAME, "arguments": {...}}; when the task is done, reply with a JSON '
          "report instead. The tools:\n" + json.dumps(TOOLS, indent=2) + "\n")
SESSIONS_PER_TASK = 3
GREP_MATCHES = 10
READ_LINES = 24
EDIT_CONTEXT_LINES = 2  # body lines the edit's `old` carries after the check's place
INTROS = {
    "list_dir": ("I will start by listing the package.", "First, the files of the package.",
                 "Let me see what the package holds."),
    "grep": ("Now I look for the definition.", "Next, where is the function defined?",
             "Let me find the function."),
    "read_file": ("The definition is in the grep output; I read it.", "Found it. Reading the code.",
                  "Let me read the function."),
    "edit_file": ("I add the check above the first line of the body.",
                  "The body starts after the docstring: the check goes there.",
                  "Editing the function now."),
    "run_tests": ("The edit applied; now the tests.", "Let me run the package's tests.",
                  "Checking that nothing broke."),
    "report": ("All tests pass. Done.", "The task is complete.", "Finished: here is the report."),
}


@dataclass(frozen=True)
class Task:
    package: str
    path: str
    function: str
    argument: str
    lines: tuple[str, ...]  # the file's
    def_index: int
    body: int

    def describe(self) -> str:
        return (f"In the `{self.package}` package, `{self.function}` must raise ValueError when "
                f"`{self.argument}` is None. Find it, fix it and run the tests.")


@dataclass(frozen=True)
class Step:
    """One turn of the loop: the agent's call (or final report) and what the tool answered."""

    kind: str  # a key of INTROS
    call: dict
    output: dict | None  # None for the final report


def _tasks(corpus: Corpus, rng: random.Random, count: int) -> list[Task]:
    packaged = [s for s in corpus.sources if "/" in s.name]
    tasks = []
    while len(tasks) < count:
        source = rng.choice(packaged)
        lines = source.text.splitlines(keepends=True)
        if not (options := checkable_functions(lines)):
            continue
        chosen = rng.choice(options)
        tasks.append(Task(source.name.rsplit("/", 1)[0], source.name, chosen.function,
                          rng.choice(chosen.arguments), tuple(lines), chosen.def_index, chosen.body))
    return tasks


def _grep(corpus: Corpus, task: Task) -> list[dict]:
    word = re.compile(rf"\b{re.escape(task.function)}\b")
    definition = {"path": task.path, "line": task.def_index + 1,
                  "text": task.lines[task.def_index].strip()}
    others = [{"path": s.name, "line": number, "text": line.strip()}
              for s in corpus.sources if s.name.startswith(task.package + "/")
              for number, line in enumerate(s.text.splitlines(), 1) if word.search(line)]
    return [definition] + [m for m in others if m != definition][: GREP_MATCHES - 1]


def _steps(corpus: Corpus, task: Task, rng: random.Random) -> list[Step]:
    """The loop's turns for the task; the same task always gives the same calls and outputs."""
    entries = sorted({s.name[len(task.package) + 1:].split("/")[0] for s in corpus.sources
                      if s.name.startswith(task.package + "/")})
    start, end = task.def_index + 1, min(len(task.lines), task.def_index + READ_LINES)
    old = "".join(task.lines[task.body - 1: task.body + EDIT_CONTEXT_LINES])
    new = "".join([task.lines[task.body - 1], *check_lines(task.lines[task.body], task.argument),
                   *task.lines[task.body: task.body + EDIT_CONTEXT_LINES]])
    passed = rng.randint(20, 400)
    change = f"`{task.function}` raises ValueError when `{task.argument}` is None"
    return [
        Step("list_dir", {"tool": "list_dir", "arguments": {"path": task.package}},
             {"path": task.package, "entries": entries}),
        Step("grep", {"tool": "grep", "arguments": {"pattern": task.function, "path": task.package}},
             {"matches": _grep(corpus, task)}),
        Step("read_file", {"tool": "read_file", "arguments": {"path": task.path, "start": start, "end": end}},
             {"path": task.path, "start": start, "end": end, "text": "".join(task.lines[start - 1:end])}),
        Step("edit_file", {"tool": "edit_file", "arguments": {"path": task.path, "old": old, "new": new}},
             {"path": task.path, "replaced": 1}),
        Step("run_tests", {"tool": "run_tests", "arguments": {"path": task.package}},
             {"package": task.package, "passed": passed, "failed": 0}),
        Step("report", {"status": "done", "file": task.path, "function": task.function,
                        "change": change, "tests": {"passed": passed, "failed": 0}}, None),
    ]


def _output_lines(steps: list[Step]) -> list[str]:
    """Lines of the tool outputs, the newest output's first."""
    lines = []
    for step in reversed(steps):
        for value in step.output.values():
            if isinstance(value, str) and "\n" in value:
                lines += [f"- `{line.strip()}`" for line in value.splitlines() if line.strip()]
            elif isinstance(value, list):
                lines += [f"- {json.dumps(item)}" for item in value]
    return lines


def _turn(tokenizer: Tokenizer, rng: random.Random, step: Step, done: list[Step],
          trace_length: int) -> list[int]:
    """The agent's turn, at most trace_length tokens: notes as long as the call leaves room
    for, restating the outputs (newest first, skipping a line now and then), then the tools
    it has (so that even the first turn has something to restate)."""
    call_ids = tokenizer.encode("\n" + json.dumps(step.call)).ids
    notes, room = rng.choice(INTROS[step.kind]), trace_length - len(call_ids)
    restated = [line for line in _output_lines(done) if rng.random() < 0.8]
    restated += [f"- tool {json.dumps(tool)}" for tool in TOOLS]
    tokens = len(tokenizer.encode(notes).ids)
    for line in restated:
        if tokens >= room:
            break
        notes += "\n" + line
        tokens += len(tokenizer.encode("\n" + line).ids)
    return (tokenizer.encode(notes).ids[: max(room, 0)] + call_ids)[:trace_length]


def _prompt(task: Task, done: list[Step], elided: int) -> str:
    """Earlier turns as the loop resends them: calls and outputs, not the notes before each call
    (as reasoning models' chat templates drop earlier reasoning); the oldest `elided` outputs
    replaced by a marker, which agents' context managers do when the window fills."""
    prompt = f"{SYSTEM}<|user|>{task.describe()}\n"
    for index, step in enumerate(done):
        output = {"elided": True} if index < elided else step.output
        prompt += f"<|assistant|>{json.dumps(step.call)}\n<|tool|>{json.dumps(output)}\n"
    return prompt + "<|assistant|>"


def build(corpus: Corpus, tokenizer: Tokenizer, rng: random.Random, count: int,
          lengths: Lengths) -> list[Request]:
    turns_per_session = 6
    sessions = -(-count // turns_per_session)
    tasks = _tasks(corpus, rng, max(1, sessions // SESSIONS_PER_TASK))
    # Each task's tool outputs are fixed (a run_tests count included), whichever session calls them.
    steps = {task: _steps(corpus, task, random.Random(f"{task.path}:{task.function}")) for task in tasks}
    requests = []
    for session in range(sessions):
        task = tasks[session % len(tasks)]
        for turn, step in enumerate(steps[task]):
            if len(requests) == count:
                break
            done = steps[task][:turn]
            elided, prompt = 0, _prompt(task, done, 0)
            while elided < len(done) and len(tokenizer.encode(prompt).ids) > lengths.prompt_max:
                elided += 1
                prompt = _prompt(task, done, elided)
            trace_ids = _turn(tokenizer, rng, step, done, lengths.draw_trace_length(rng))
            requests.append(make_request(tokenizer, NAME, len(requests), prompt,
                                         trace_ids, len(trace_ids), lengths))
    return requests
