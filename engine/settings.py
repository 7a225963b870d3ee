"""Every environment variable the app, the engine, the scripts and the tests read: its name, type, default and
meaning, in one table (``SETTINGS``). Nothing else reads the environment (tests/engine/test_settings.py).

- Values are read when asked for, never cached at import: a test or the threads benchmark changes one while a
  process runs, and a restart picks up a change.
- One on/off vocabulary for every switch: on = ``1 on true yes``, off = ``0 off false no`` (any case, spaces
  ignored). A value that does not parse says so once on stderr and the default applies: a misspelt setting never
  stops a class.
- Functions that take an ``environ`` mapping (the class policy, the background preparation) read that mapping
  instead of the process's environment, so a test can pass one.

docs/settings.md's table is generated from ``SETTINGS``: ``python -m engine settings`` rewrites it, and a test fails
when the file is not current. Shell scripts (scripts/*.sh) read a few variables of their own; they are declared here
too (scope "shell"), so the table lists them, though no Python code reads them.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from engine.mode import DEFAULT_MODE, Mode

ON = frozenset({"1", "on", "true", "yes"})
OFF = frozenset({"0", "off", "false", "no"})
KINDS = ("flag", "int", "choice", "path", "text", "list", "secret")
SCOPES = {  # the docs table's sections, in order
    "app": "The app and the engine",
    "class": "Serving a class",
    "threads": "CPU threads",
    "external": "Read from other tools' conventions",
    "scripts": "Scripts",
    "shell": "Shell scripts (read by scripts/*.sh only)",
    "tests": "Tests",
}
_warned: set[tuple[str, str]] = set()


def _warn(name: str, raw: str, why: str) -> None:
    if (name, raw) not in _warned:
        _warned.add((name, raw))
        sys.stderr.write(f"[engine] setting {name}={raw[:40]!r} {why}\n")
        sys.stderr.flush()


def flag(text: str | None, default: bool, name: str = "a switch") -> bool:
    """``text`` read as on or off in the one vocabulary; None, blank or unreadable: ``default`` (unreadable says so
    once on stderr)."""
    if text is None or not text.strip():
        return default
    word = text.strip().lower()
    if word in ON:
        return True
    if word in OFF:
        return False
    _warn(name, text, f"is neither on ({', '.join(sorted(ON))}) nor off ({', '.join(sorted(OFF))}): "
                      f"{'on' if default else 'off'} applies")
    return default


@dataclass(frozen=True)
class Setting:
    """One environment variable. ``get()`` is its typed value (the default when unset or unreadable); ``raw()`` the
    text as set (stripped; None when unset or blank)."""

    name: str
    kind: str  # one of KINDS
    default: Any
    doc: str  # one sentence for docs/settings.md
    scope: str  # one of SCOPES
    # kind "choice": the values it takes (``on``/``off`` also by their other words); ``get()`` returns the one that
    # matches, so choices that are an Enum's members (str enums) give the member
    choices: tuple[str, ...] = ()
    minimum: int | None = None  # kind "int": smaller values read as this
    default_doc: str = ""  # how the default reads in the docs when it is not a plain value

    def raw(self, environ: Mapping[str, str] | None = None) -> str | None:
        text = (os.environ if environ is None else environ).get(self.name)
        return text.strip() if text is not None and text.strip() else None

    def is_set(self, environ: Mapping[str, str] | None = None) -> bool:
        return self.raw(environ) is not None

    def get(self, environ: Mapping[str, str] | None = None) -> Any:
        raw = self.raw(environ)
        if raw is None:
            return self.default
        if self.kind == "flag":
            return flag(raw, self.default, self.name)
        if self.kind == "int":
            try:
                value = int(raw)
            except ValueError:
                _warn(self.name, raw, f"is not a whole number: {self.default} applies")
                return self.default
            return value if self.minimum is None else max(self.minimum, value)
        if self.kind == "choice":
            word = raw.lower()
            word = "on" if word in ON and "on" in self.choices else "off" if word in OFF and "off" in self.choices \
                else word
            for choice in self.choices:
                if choice == word:
                    return choice
            _warn(self.name, raw, f"is not one of {', '.join(self.choices)}: {self.default} applies")
            return self.default
        if self.kind == "path":
            return Path(raw).expanduser()
        return raw


# ------------------------------------------------------------------------------------------ the app and the engine
CACHE_DIR = Setting("ILE_CACHE_DIR", "path", None, "Where converted models and torch's compiled kernels are kept.",
                    "app", default_doc="`$XDG_CACHE_HOME/inference-loop-explorer` (`~/.cache/...`)")
PREPARE_GEMMA = Setting("ILE_PREPARE_GEMMA", "flag", True, "Convert Gemma 3 270M in a child process as soon as the "
                        "first page is drawn (once per machine); off waits until someone picks it.", "app")
RUN_LOG = Setting("ILE_RUN_LOG", "path", None, "A file to which each full script run appends one line naming its "
                  "page (the browser tests count reruns with it).", "app")
WORKER_LOG = Setting("ILE_WORKER_LOG", "flag", True, "One line per finished job of the engine worker in the server's "
                     "log, with when it was submitted and when it was ready.", "app")
WORKER_STATS = Setting("ILE_WORKER_STATS", "path", None, "A file the engine worker rewrites with its state whenever a "
                       "job starts or ends (the browser tests watch it go idle).", "app")
INDUCTOR_KNOBS = Setting("ILE_INDUCTOR_KNOBS", "text", None, "Inductor options turned on for compiled mode's graphs, "
                        "comma-separated (e.g. `max_autotune`, `coordinate_descent_tuning`): for measuring one knob at "
                        "a time with `bench decode --modes` (docs/benchmarks.md); a name inductor does not know is "
                        "dropped with a warning.", "app", default_doc="none")
RACE_REPEATS = Setting("ILE_RACE_REPEATS", "int", 5, "Races the speculative page and `python -m engine race` time after "
                       "a warm-up race; their figures are the medians. Fewer than 5 (for a slow machine) are shown, "
                       "flagged as too few to teach from.", "app", minimum=1)

# ------------------------------------------------------------------------------------------ serving a class
CLASS_MODE = Setting("ILE_CLASS_MODE", "choice", "auto", "Class mode: only the allow-list's models and the listed "
                     "servers; `auto` is on when the server listens beyond this machine.", "class",
                     choices=("on", "off", "auto"))
MODELS = Setting("ILE_MODELS", "list", "", "Class mode's allow-list, comma-separated; "
                 "`label=target` offers a local folder or hub id under a label (the target is never shown).",
                 "class", default_doc="every packaged model (engine/models/catalog.py), then `tiny-random`: "
                 "`embedded,gemma3-270m,tiny-random`")
SERVERS = Setting("ILE_SERVERS", "list", "", "The serving engines a class may measure, `label=url,...` (class mode: "
                  "nothing else is contacted).", "class")
TEACHER_TOKEN = Setting("ILE_TEACHER_TOKEN", "secret", "", "The token of the teacher's class view "
                        "(`/batching?teacher=<token>`); scripts/start.sh makes a fresh one for each start.", "class",
                        default_doc="a fresh token made by the process")
CLASS_ENGINE = Setting("ILE_CLASS_ENGINE", "choice", DEFAULT_MODE, "Class mode: the engine mode every student's "
                      "session runs in until the teacher's own session picks another (a student's `?mode=` is "
                      "ignored: a compile holds the engine for minutes).", "class", choices=tuple(Mode))
TRUSTED_PROXIES = Setting("ILE_TRUSTED_PROXIES", "list", "", "Addresses of reverse proxies whose `X-Forwarded-For` "
                          "names the student's computer, comma-separated; from any other address the header is "
                          "ignored (scripts/start.sh hands it to the web server as `FORWARDED_ALLOW_IPS`).", "class",
                          default_doc="none: the header is trusted from nobody")
WARM_SECRET = Setting("ILE_WARM_SECRET", "secret", "", "The secret by which the start's warm-up session proves "
                      "itself (`X-ILE-Warm-Up`); scripts/start.sh makes a fresh one for each start and gives it "
                      "only to the server and scripts/warm.py.", "class",
                      default_doc="none: no session is the warm-up")
BATCHING = Setting("ILE_BATCHING", "flag", True, "Serve generation requests of many sessions in one continuous batch; "
                   "off serves them one at a time (the serial worker, for comparison).", "class")
MAX_BATCH = Setting("ILE_MAX_BATCH", "int", 32, "Rows in one batch of the class worker.", "class", minimum=1)

# ------------------------------------------------------------------------------------------ CPU threads
THREAD_POLICY = Setting("ILE_THREAD_POLICY", "flag", True, "The engine's measured CPU thread policy; off leaves "
                        "torch's defaults (the threads benchmark's candidates use it).", "threads")
THREADS = Setting("ILE_THREADS", "text", None, "Torch's intra-op threads: `cores`, `cores-1` or a number; set, it "
                  "also turns the free-cores rule off.", "threads", default_doc="the policy's: `cores`")
SMALL_PASS_ROWS = Setting("ILE_SMALL_PASS_ROWS", "int", None, "Forward passes of at most this many token rows run on "
                          "one thread (0: never).", "threads", minimum=0,
                          default_doc="8 (0 with `ILE_THREAD_POLICY=off`)")
ADAPTIVE_THREADS = Setting("ILE_ADAPTIVE_THREADS", "flag", True, "Prompt-sized passes use only the cores other "
                           "programs left free over the last second.", "threads")

# ------------------------------------------------------------------------------------------ other tools' conventions
XDG_CACHE_HOME = Setting("XDG_CACHE_HOME", "path", None, "The user's cache folder (the default of `ILE_CACHE_DIR` and "
                         "of the llama.cpp build cache).", "external", default_doc="`~/.cache`")
HF_ENDPOINT = Setting("HF_ENDPOINT", "text", "https://huggingface.co", "The Hugging Face hub whose reachability is "
                      "checked before a hub id is loaded (huggingface_hub's own setting).", "external")
HF_HUB_OFFLINE = Setting("HF_HUB_OFFLINE", "flag", False, "Offline: a hub id loads only from the local Hugging Face "
                         "cache, with no network probe (huggingface_hub's own setting).", "external")
HF_HUB_CACHE = Setting("HF_HUB_CACHE", "path", None, "Where the tokenization page looks for tokenizers already "
                       "downloaded (huggingface_hub's own setting).", "external",
                       default_doc="`$HF_HOME/hub`")
HF_HOME = Setting("HF_HOME", "path", None, "huggingface_hub's home folder.", "external",
                  default_doc="`~/.cache/huggingface`")
OPENAI_API_KEY = Setting("OPENAI_API_KEY", "secret", "", "The API key `serve-bench` sends when `--api-key` is not "
                         "given.", "external")
OMP_WAIT_POLICY = Setting("OMP_WAIT_POLICY", "text", None, "OpenMP's idle threads spin or sleep; the engine sets "
                          "`PASSIVE` before torch loads unless the user set it.", "external",
                          default_doc="set by the engine: `PASSIVE`")
CXX = Setting("CXX", "text", None, "The C++ compiler torch.compile's CPU backend uses (compiled mode checks that "
              "one exists).", "external", default_doc="`g++`, `c++` or `clang++` on the PATH")
TORCHINDUCTOR_CACHE_DIR = Setting("TORCHINDUCTOR_CACHE_DIR", "path", None, "Where torch keeps compiled kernels; the "
                                  "engine points it into the model cache unless it is set.", "external",
                                  default_doc="set by the engine: `$ILE_CACHE_DIR/torchinductor`")
NO_COLOR = Setting("NO_COLOR", "text", None, "Any value: the command line writes no bold (no-color.org); it writes "
                   "bold only to a terminal anyway.", "external")

# ------------------------------------------------------------------------------------------ scripts
WARM = Setting("ILE_WARM", "flag", True, "scripts/start.sh warms the server after a start (model loaded, the default "
               "run done) before the first visitor.", "scripts")
PYTHON = Setting("PYTHON", "path", None, "Use this interpreter as it is; make no environment (a conda env, a CI "
                 "image).", "shell", default_doc="the project's `.venv`")
VENV = Setting("ILE_VENV", "path", None, "Where scripts/venv.sh makes the project's environment.", "shell",
               default_doc="`.venv` in the checkout")
BASE_PYTHON = Setting("ILE_BASE_PYTHON", "text", None, "The Python that makes the environment.", "shell",
                      default_doc="the newest `python3.10`-`3.13` on the PATH")
TEST_WORKERS = Setting("ILE_TEST_WORKERS", "int", None, "pytest workers of scripts/test.sh's first phase (the tiers "
                      "that read no clock); 1 runs it serially.", "shell", minimum=1,
                      default_doc="the number of cores")
WHEEL_CACHE = Setting("ILE_WHEEL_CACHE", "path", None, "Where the one llama.cpp build (llama-server and "
                      "llama-cpp-python's wheel) is kept, per build flags.", "shell",
                      default_doc="`$XDG_CACHE_HOME/ile-wheels`")

# ------------------------------------------------------------------------------------------ tests
TEST_DEVICE = Setting("ILE_TEST_DEVICE", "text", "cpu", "The device the test tiers load models on.", "tests")
SCREENSHOTS = Setting("ILE_SCREENSHOTS", "flag", None, "The browser tests save screenshots.", "tests",
                      default_doc="on, except under `CI`")
CI = Setting("CI", "flag", False, "Set by CI services: the browser tests save no screenshots, and a llama.cpp the "
             "serving tests cannot run (missing, or killed by a signal) fails them instead of skipping.", "tests")
FULL_CLASS_TEST = Setting("ILE_FULL_CLASS_TEST", "flag", False, "Run the full 20-session class tests in a real "
                          "browser (minutes).", "tests")
GPU_PATH_TESTS = Setting("ILE_GPU_PATH_TESTS", "flag", False, "Run the SmolLM2 test of the class batcher's GPU "
                         "prefill path forced on this CPU (compiles for minutes).", "tests")
CLASS_SESSIONS = Setting("ILE_CLASS_SESSIONS", "int", None, "Sessions in the browser class tests.", "tests", minimum=1,
                         default_doc="5 (20 with `ILE_FULL_CLASS_TEST`)")
TEST_BESIDE_PID = Setting("ILE_TEST_BESIDE_PID", "int", None, "Set by scripts/test.sh for its browser phase: the "
                          "parallel phase's process, running beside it at idle priority; the tests marked `alone` wait "
                          "until it has ended.", "tests", minimum=1)
LLAMA_SERVER = Setting("ILE_LLAMA_SERVER", "path", None, "A llama.cpp `llama-server` binary for the serving tests.",
                       "tests", default_doc="the one scripts/install.sh built")

SETTINGS: tuple[Setting, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Setting))


def cache_dir() -> Path:
    """The app's folder for converted models and compiled kernels: ``ILE_CACHE_DIR``, else the user's cache."""
    return CACHE_DIR.get() or (XDG_CACHE_HOME.get() or Path.home() / ".cache") / "inference-loop-explorer"


# ------------------------------------------------------------------------------------------ the docs' table
BEGIN, END = "<!-- settings:begin (generated by python -m engine settings) -->", "<!-- settings:end -->"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "settings.md"


def _default_cell(s: Setting) -> str:
    if s.default_doc:
        return s.default_doc
    if s.kind == "flag":
        return "on" if s.default else "off"
    if s.default in (None, ""):
        return "unset"
    return f"`{s.default}`"


def markdown_table() -> str:
    """The settings as markdown, one table per scope (what docs/settings.md holds between its markers)."""
    out = []
    for scope, title in SCOPES.items():
        rows = [s for s in SETTINGS if s.scope == scope]
        if not rows:
            continue
        out += [f"### {title}", "", "| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
        for s in rows:
            kind = f"{s.kind}: {' / '.join(s.choices)}" if s.choices else s.kind
            out.append(f"| `{s.name}` | {kind} | {_default_cell(s)} | {s.doc} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def docs_with_table(text: str) -> str:
    """``text`` (docs/settings.md) with the generated table between its markers."""
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"docs/settings.md has no {BEGIN} ... {END} markers")
    return f"{head}{BEGIN}\n{markdown_table()}{END}{tail}"


def write_docs() -> Path:
    """Rewrite docs/settings.md's table from ``SETTINGS`` (``python -m engine settings``)."""
    DOCS.write_text(docs_with_table(DOCS.read_text()))
    return DOCS
