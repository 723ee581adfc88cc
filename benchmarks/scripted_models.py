"""The scripted proposer models of benchmarks/proposer.py, and the OpenAI-compatible server
that answers for them (stdlib `http.server` on 127.0.0.1).

The scripted models. A reply is the JSON `{"thought", "name", "code"}` built from the programs
the user message quotes (`prompts.describe_program`'s python block under "Program to improve",
or "Parent A" and "Parent B"), with an RNG seeded from (rng seed, model, the messages' text):
- `careful`: the offline mutation operator (`MutationProposer.propose` on the quoted parent;
  a crossover for two). When the prompt has the guidance section (`prompts.GUIDANCE_TITLE`) and
  a "what worked" bullet there gained over its parent by a change whose `-`/`+` lines differ in
  one token, then with probability 1/2 it re-applies that change (`guided_edit`): a parent that
  still has the `-` line gets the `+` line; a parent that has the `+` line of a numeric change
  a -> b gets b * (b / a) there (the same step again; b + (b - a) when b / a <= 0). Otherwise,
  or when no line of the parent matches, it mutates. This is the script's only use of the
  run's history (the best program and inspirations in the prompt are ignored). The guidance
  section is left out of the RNG's seed and both draws are made with or without notes
  (common random numbers): notes that give no usable change change no answer, so a
  `+guidance` run differs from `baseline` only where the notes were acted on.
- `sloppy`: 40% the parent with its locals renamed and a comment added (code similarity 1.0
  after normalisation; without near-duplicate rejection the cascade still stops it after the
  probes, its outputs being identical), 20% the parent with its output scaled by 1.0001 (a
  behaviour near-duplicate that code similarity misses and that is trained without
  `behaviour_novelty`), 15% the parent rewritten with numpy (stopped by the static check),
  25% a mutation as `careful` makes it without guidance.
- Asked for guidance notes (`LLMProposer.write_guidance`), either model restates the facts it
  is given as "What worked:" bullets (score, gain over the parent, changed lines) and "What
  failed:" bullets, the rule summary's content, through the LLM-written path.
Both models are registered with litellm at one equal price per token, so the bandit's cost is
USD from the server's token counts, not the latency of a shared machine (noise, and a bandit
run could not be reproduced).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import random
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from metarl.discovery.proposers.base import ParentInfo, ProposalRequest
from metarl.discovery.proposers.llm import prompts
from metarl.discovery.proposers.llm.client import import_litellm
from metarl.discovery.proposers.mutation import MutationProposer
from metarl.tasks import get_task

CAREFUL, SLOPPY = "openai/careful", "openai/sloppy"
PRICE_IN, PRICE_OUT = 1e-6, 2e-6  # USD per token, the same for both models
GUIDANCE_SYSTEM = "You keep the short notes"  # how prompts.guidance_request's system starts
PROGRAM = re.compile(
    r"^(Program to improve|Parent A|Parent B|Best program so far|Another program, for "
    r"inspiration): .*?```python\n(.*?)\n```",
    re.S | re.M,
)
TOKEN = re.compile(r"\d+\.\d*(?:e[-+]?\d+)?|\d+|[A-Za-z_][\w.]*|\S")
RUN_ID = re.compile(r"\br\d+-(\d+)")
# the guidance section as the JSON of the messages holds it (its newlines escaped)
GUIDANCE_SECTION = re.compile(re.escape(prompts.GUIDANCE_TITLE) + r".*?```text\\n.*?\\n```\\n\\n")
TASK = get_task("drift")


# -- what the scripted models write ------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One scripted answer: the program and how it was made (`kind`, for the log)."""

    code: str | None
    name: str
    thought: str
    kind: str

    def text(self) -> str:
        """The reply as the JSON object the prompts ask for."""
        return json.dumps({"thought": self.thought, "name": self.name, "code": self.code or ""})


def quoted_programs(user: str) -> dict[str, str]:
    """The programs a proposal prompt quotes: label ("Program to improve", "Parent A", ...) ->
    code (the first of each label)."""
    found: dict[str, str] = {}
    for label, code in PROGRAM.findall(user):
        found.setdefault(label, code)
    return found


def guidance_text(user: str) -> str | None:
    """The run's notes as the prompt's guidance section quotes them, or None."""
    start = user.find(prompts.GUIDANCE_TITLE)
    if start < 0:
        return None
    match = re.search(r"```text\n(.*?)\n```", user[start:], re.S)
    return match.group(1) if match else None


def mutate(codes: list[str], seed: int) -> Reply | None:
    """The offline mutation operator on `codes` (one parent: a mutation, two: a crossover)."""
    parents = [ParentInfo(id=f"p{i}", code=code, name="scripted") for i, code in enumerate(codes)]
    request = ProposalRequest(task=TASK, parents=parents, rng_seed=seed)
    proposal = MutationProposer().propose(request)
    if proposal.code is None:
        return None
    return Reply(proposal.code, proposal.name.replace(".", "_"), proposal.thought, "mutation")


def _spans(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]


def _number(token: str) -> float | None:
    return float(token) if re.fullmatch(r"[\d.]+(?:e[-+]?\d+)?", token) else None


def hints(notes: str) -> list[tuple[str, str]]:
    """The (removed line, added line) pairs of the notes' bullets that gained over their
    parent, in the notes' order."""
    found = []
    for line in notes.splitlines():
        gain = re.search(r"([+-]\d+\.\d+) over its parent", line)
        if gain is None or float(gain.group(1)) <= 0:
            continue
        changes = re.findall(r"`([-+]) ([^`]+)`", line)
        removed = [text for sign, text in changes if sign == "-"]
        added = [text for sign, text in changes if sign == "+"]
        if removed and added:
            found.append((removed[0].strip(), added[0].strip()))
    return found


def guided_edit(code: str, notes: str) -> Reply | None:
    """`code` with the first change the notes say worked re-applied (see the module
    docstring), or None when no change applies to it."""
    try:
        lines = ast.unparse(ast.parse(code)).splitlines()
    except SyntaxError:
        return None
    for old, new in hints(notes):
        old_tokens, new_tokens = _spans(old), _spans(new)
        matcher = difflib.SequenceMatcher(
            None, [t for t, _, _ in old_tokens], [t for t, _, _ in new_tokens], autojunk=False
        )
        edits = [op for op in matcher.get_opcodes() if op[0] != "equal"]
        if len(edits) != 1 or edits[0][0] != "replace":
            continue
        _, i1, i2, j1, j2 = edits[0]
        if i2 - i1 != 1 or j2 - j1 != 1:
            continue
        before, after = old_tokens[i1][0], new_tokens[j1][0]
        for index, line in enumerate(lines):
            if line.strip() == old:  # the parent has the old line: transplant the change
                lines[index] = line.replace(old, new)
                what = f"re-applied the change the notes say worked: `{old}` -> `{new}`"
            elif line.strip() == new and None not in (_number(before), _number(after)):
                a, b = _number(before), _number(after)
                step = b * (b / a) if a and b / a > 0 else b + (b - a)
                value = float(f"{step:.4g}")
                _, start, end = new_tokens[j1]
                indent = line[: len(line) - len(line.lstrip())]
                lines[index] = indent + new[:start] + repr(value) + new[end:]
                what = f"continued the change the notes say worked: {before} -> {after} -> {value}"
            else:
                continue
            edited = "\n".join(lines) + "\n"
            digest = hashlib.sha256(edited.encode()).hexdigest()[:5]
            return Reply(edited, f"guided_{digest}", what, "guided")
    return None


def renamed(code: str) -> str:
    """The same program with its locals renamed, laid out again and a comment added."""
    tree = ast.parse(code)
    names = [node for node in ast.walk(tree) if isinstance(node, ast.Name)]
    local = {node.id for node in names if isinstance(node.ctx, ast.Store)}
    for node in names:
        if node.id in local:
            node.id = f"{node.id}_value"
    return "# tidied up: clearer names\n" + ast.unparse(tree) + "\n"


def scaled(code: str) -> str:
    """The same program with every returned value scaled by 1.0001."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            node.value = ast.BinOp(node.value, ast.Mult(), ast.Constant(1.0001))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def with_numpy(code: str) -> str:
    """The program rewritten with numpy, which the static check refuses."""
    return "import numpy as np\n\n" + code.replace("jnp.", "np.")


def careful(programs: dict[str, str], notes: str | None, rng: random.Random) -> Reply | None:
    """The careful model's answer: a real edit, guided by the notes half of the time. Both
    draws are made whether or not there are notes, so notes that give no usable change leave
    the answer as it is without them."""
    coin, seed = rng.random(), rng.getrandbits(31)
    if "Parent A" in programs and "Parent B" in programs:
        return mutate([programs["Parent A"], programs["Parent B"]], seed)
    parent = programs.get("Program to improve") or programs.get("Best program so far")
    if parent is None:
        return None
    if notes and coin < 0.5:
        guided = guided_edit(parent, notes)
        if guided is not None:
            return guided
    return mutate([parent], seed)


def sloppy(programs: dict[str, str], rng: random.Random) -> Reply | None:
    """The sloppy model's answer: mostly the parent again (renamed or scaled), or broken."""
    roll = rng.random()
    parent = programs.get("Program to improve") or programs.get("Parent A")
    if parent is None or roll >= 0.75:
        return careful(programs, None, rng)
    try:
        ast.parse(parent)
    except SyntaxError:
        return None
    if roll < 0.40:
        return Reply(renamed(parent), "tidied", "clearer variable names", "rename")
    if roll < 0.60:
        return Reply(scaled(parent), "rescaled", "a slightly stronger drift", "scaled")
    return Reply(with_numpy(parent), "numpy_drift", "numpy is clearer", "numpy")


def guidance_reply(user: str) -> str:
    """The notes either model writes from the facts it is given (the rule summary's content)."""
    match = re.search(r"Facts from the archive:\n```text\n(.*?)\n```", user, re.S)
    facts = match.group(1) if match else ""
    worked, failed, section = [], [], ""
    for line in facts.splitlines():
        if line.startswith("Best children"):
            section = "worked"
        elif line.startswith("Commonest failure"):
            section = "failed"
        elif section == "worked" and line.startswith("- `"):
            worked.append([line, []])
        elif section == "worked" and worked and line.startswith(("  - ", "  + ")):
            worked[-1][1].append(line.strip())
        elif section == "failed" and line.startswith("- ") and line != "- none":
            failed.append(line)
    bullets = [
        head + (". Change: " + " | ".join(f"`{c}`" for c in changes[:4]) if changes else "")
        for head, changes in worked
    ]
    notes = "What worked:\n" + ("\n".join(bullets) or "- nothing yet")
    notes += "\nWhat failed:\n" + ("\n".join(failed) or "- nothing yet")
    return json.dumps({"guidance": notes[: prompts.GUIDANCE_ASK_CHARS]})


def answer(model: str, messages: list[dict], seed: int) -> tuple[str, str]:
    """The scripted reply to one chat request and its kind, deterministic from (seed, model,
    the messages with run-specific candidate ids normalised)."""
    system = next((m["content"] for m in messages if m.get("role") == "system"), "")
    users = [m["content"] for m in messages if m.get("role") == "user"]
    if system.startswith(GUIDANCE_SYSTEM):
        return guidance_reply(users[-1] if users else ""), "guidance"
    text = RUN_ID.sub(r"#\1", json.dumps([m.get("content") for m in messages]))
    text = GUIDANCE_SECTION.sub("", text)  # common random numbers with and without notes
    digest = hashlib.sha256(f"{seed}|{model}|{text}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    first = users[0] if users else ""
    programs = quoted_programs(first)
    if model.endswith("careful"):
        reply = careful(programs, guidance_text(first), rng)
    else:
        reply = sloppy(programs, rng)
    if reply is None:
        return json.dumps({"thought": "no idea", "name": "none", "code": ""}), "none"
    return reply.text(), reply.kind


# -- the server --------------------------------------------------------------------------------


@dataclass
class ScriptedModels:
    """The two scripted models behind an OpenAI-compatible /v1/chat/completions on 127.0.0.1.

    Attributes:
        seed: the rng seed mixed into every reply (set per run).
        kinds: how many replies of each kind were sent (per model), for the log.
    """

    seed: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    _httpd: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> str:
        """Serve in a daemon thread; returns the api_base URL."""
        models = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                payload = json.loads(body or b"{}")
                model = str(payload.get("model", ""))
                messages = payload.get("messages") or []
                text, kind = answer(model, messages, models.seed)
                with models._lock:
                    key = f"{model.rsplit('/', 1)[-1]}:{kind}"
                    models.kinds[key] = models.kinds.get(key, 0) + 1
                data = json.dumps(completion(model, messages, text)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


def completion(model: str, messages: list[dict], text: str) -> dict:
    """The chat-completion body answering `messages` with `text` (tokens: 4 characters)."""
    prompt = max(1, sum(len(str(m.get("content") or "")) for m in messages) // 4)
    usage = {"prompt_tokens": prompt, "completion_tokens": len(text) // 4 + 1}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return {"id": "scripted", "object": "chat.completion", "created": 0, "model": model,
            "choices": [choice], "usage": usage}  # fmt: skip


def register_prices() -> None:
    """One equal price per token for both scripted models (see the module docstring)."""
    litellm = import_litellm()
    for model in (CAREFUL, SLOPPY):
        litellm.register_model(
            {
                model: {
                    "input_cost_per_token": PRICE_IN,
                    "output_cost_per_token": PRICE_OUT,
                    "litellm_provider": "openai",
                    "mode": "chat",
                }
            }
        )
