"""The LLM proposer in its two loop modes.

**population**: one independent prompt per child, built from the loop's selection: one parent
gives a full rewrite or a SEARCH/REPLACE diff (drawn per request), two parents a crossover, none
a fresh program; inspirations and the best so far are shown alongside, each with its results.

**conversation**: one growing dialogue (as in DiscoPOP / learn-rl-algorithms). After each
candidate the model is told how it did; when the dialogue grows past `history_token_budget`
(estimated at 4 characters a token) it is restarted as [system, summary], where the summary holds
the best programs so far and the latest attempt's feedback. Every message is handed to the loop
through `drain_messages` after feedback and archived, and `restore_messages` rebuilds the active
dialogue (from the last system message on) on resume.

In both modes an unusable reply gets one repair round-trip carrying the exact parse problem, and
a model fault never raises: the proposal fails with the reason and its calls are still recorded.
With a model bandit (bandit.py, the client's `bandit`), every proposal's outcome is fed to it in
both modes: the child's improvement over the best parent's fitness (kept on the proposal, as
`parent_fitness`, so that a resumed run's planned proposals still have it) for its calls' cost;
its state travels in `get_state`/`set_state`.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from metarl.discovery.proposers.base import LLMCall, ParentInfo, Proposal, ProposalRequest
from metarl.discovery.proposers.llm import prompts
from metarl.discovery.proposers.llm.bandit import ModelBandit, improvement_of, spends
from metarl.discovery.proposers.llm.client import LLMClient
from metarl.discovery.proposers.llm.diff import DiffError, apply_diff, has_blocks, strip_blocks
from metarl.discovery.proposers.llm.extraction import (
    Extraction,
    ExtractionError,
    check_code,
    clean_name,
    extract,
    json_objects,
)
from metarl.evaluation.outcome import Outcome
from metarl.tasks import get_task

MODES = ("population", "conversation")
TOP_KEPT = 5  # programs the conversation proposer remembers for its summaries


class LLMProposer:
    def __init__(
        self,
        client: LLMClient,
        mode: str = "population",
        edit_forms: dict[str, float] | None = None,
        history_token_budget: int = 16000,
        repair_rounds: int = 1,
        rng_seed: int = 0,
    ):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of: {', '.join(MODES)}")
        self.client = client
        self.mode = mode
        self.edit_forms = edit_forms or {"rewrite": 0.5, "diff": 0.5}
        self.history_token_budget = int(history_token_budget)
        self.repair_rounds = int(repair_rounds)
        self.rng_seed = int(rng_seed)
        models = [m.model for m in client.models]
        self.name = "llm:" + "+".join(models)
        self._lock = threading.Lock()
        self._calls = 0  # calls made, for the record and the state
        self._cost = 0.0
        # conversation state
        self._context: list[dict[str, str]] = []  # what is sent: from the last system message
        self._undrained: list[dict[str, str]] = []
        self._last: dict | None = None  # the last candidate: id, name, fitness
        self._top: list[dict] = []  # best programs seen: id, name, code, fitness, thought
        self._pending_best: ParentInfo | None = None
        self._last_feedback: str | None = None
        self._task = None
        self._compactions = 0

    # -- the contract ----------------------------------------------------------------------
    def propose(self, request: ProposalRequest) -> Proposal:
        if self.mode == "conversation":
            with self._lock:
                return self._propose_conversation(request)
        return self._propose_population(request)

    def feedback(self, proposal: Proposal, outcome: Outcome, candidate_id: str) -> None:
        self._feed_bandit(proposal, outcome)
        if self.mode != "conversation":
            return
        with self._lock:
            self._feedback_conversation(proposal, outcome, candidate_id)

    def get_state(self) -> dict[str, Any]:
        bandit = self.client.bandit
        with self._lock:
            return {
                "bandit": bandit.to_dict() if bandit is not None else None,
                "mode": self.mode,
                "rng_seed": self.rng_seed,
                "calls": self._calls,
                "cost_usd": self._cost,
                "last": self._last,
                "top": self._top,
                "compactions": self._compactions,
                "last_feedback": self._last_feedback,
                "task": self._task.name if self._task is not None else None,
            }

    def set_state(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._calls = int(state.get("calls", 0))
            self._cost = float(state.get("cost_usd", 0.0) or 0.0)
            self._last = state.get("last")
            self._top = list(state.get("top") or [])
            self._compactions = int(state.get("compactions", 0))
            self._last_feedback = state.get("last_feedback")
            if state.get("task") and self._task is None:
                self._task = get_task(state["task"])
            if state.get("bandit") and self.client.bandit is not None:
                models = [m.model for m in self.client.models]
                self.client.bandit = ModelBandit.from_dict(state["bandit"], models)

    def drain_messages(self) -> list[dict[str, str]]:
        with self._lock:
            drained, self._undrained = self._undrained, []
            return drained

    def restore_messages(self, messages: list[dict[str, str]]) -> None:
        with self._lock:
            restored = [{"role": m["role"], "content": m["content"]} for m in messages]
            starts = [i for i, m in enumerate(restored) if m["role"] == "system"]
            self._context = restored[starts[-1] :] if starts else restored
            self._undrained = []

    def write_guidance(
        self, facts: str, previous: str | None, request_seed: int = 0
    ) -> tuple[str | None, LLMCall | None]:
        """Ask the model to rewrite the run's guidance (discovery/guidance.py) from `facts`
        and the `previous` version: one call, outside any dialogue.

        Args:
            facts: what the archive says (best programs and their diffs, failures, pass rates).
            previous: the current version's text, or None.
            request_seed: picks the ensemble's model reproducibly.

        Returns:
            The reply's text (None when the call failed) and the call, for the record; the
            caller checks the text and falls back to its own summary.
        """
        messages = prompts.guidance_request(facts, previous)
        self._count_call()
        call = self.client.chat(messages, request_seed=request_seed)
        self._add_cost(call)
        return call.reply, call

    # -- population ------------------------------------------------------------------------
    def _propose_population(self, request: ProposalRequest) -> Proposal:
        task = request.task
        rng = random.Random(f"{self.rng_seed}:{request.rng_seed}:form")
        parents = request.parents
        if len(parents) >= 2:
            operator = "crossover"
            user = prompts.crossover_prompt(
                task, parents[0], parents[1], request.inspirations, request.best
            )
        elif parents:
            forms = list(self.edit_forms)
            operator = rng.choices(forms, weights=[self.edit_forms[f] for f in forms], k=1)[0]
            build = prompts.diff_prompt if operator == "diff" else prompts.rewrite_prompt
            user = build(task, parents[0], request.inspirations, request.best)
        else:
            operator = "fresh"
            user = prompts.fresh_prompt(task, request.inspirations, request.best)
        user = prompts.guidance_section(request.guidance) + user
        user = prompts.rejected_section(request.rejected) + user  # re-asked: why not evaluated
        messages = [
            {"role": "system", "content": prompts.system_prompt(task)},
            {"role": "user", "content": user},
        ]
        parent_code = parents[0].code if operator == "diff" else None
        proposal, _ = self._exchange(messages, request, operator, parent_code)
        proposal.parent_ids = [p.id for p in parents[:2]]
        proposal.parent_fitness = _baseline([p.fitness for p in parents[:2]], request.best)
        return proposal

    # -- conversation ----------------------------------------------------------------------
    def _propose_conversation(self, request: ProposalRequest) -> Proposal:
        task = self._task = request.task
        self._pending_best = request.best
        if not self._context:
            programs = _unique(
                [*request.parents, *([request.best] if request.best else []), *request.inspirations]
            )
            self._append({"role": "system", "content": prompts.system_prompt(task)})
            opening = prompts.conversation_opening(task, programs, request.guidance)
            self._append({"role": "user", "content": opening})
        elif self._context[-1]["role"] != "user":
            # proposed again with no feedback in between: the loop found the last program
            # already in the archive and asks for another
            reason = request.rejected[-1] if request.rejected else None
            self._append({"role": "user", "content": prompts.not_evaluated(task, reason)})
        if len(self._context) > 2 and _estimate_tokens(self._context) > self.history_token_budget:
            self._compact(request)
        proposal, added = self._exchange(list(self._context), request, "conversation", None)
        for message in added:
            self._append(message)
        if self._last and self._last.get("id"):
            proposal.parent_ids = [self._last["id"]]
            fitnesses = [self._last.get("fitness")]
        else:
            proposal.parent_ids = [p.id for p in request.parents[:1]]
            fitnesses = [p.fitness for p in request.parents[:1]]
        proposal.parent_fitness = _baseline(fitnesses, request.best)
        return proposal

    def _feed_bandit(self, proposal: Proposal, outcome: Outcome) -> None:
        """Tell the model bandit (when there is one) what `proposal` earned: its model, the
        child's improvement over its best parent (0 when it failed or had no program), each of
        its calls' models what they cost. An evaluator's fault is nobody's: left out."""
        bandit = self.client.bandit
        if bandit is None or not proposal.calls or outcome.fault == "evaluator":
            return
        model = proposal.proposer.removeprefix("llm:")
        child = outcome.fitness if outcome.passed and proposal.code is not None else None
        gain = improvement_of(child, proposal.parent_fitness)
        for name, spend in spends(proposal.calls).items():
            bandit.observe(name, gain if name == model else 0.0, spend)

    def _feedback_conversation(self, proposal: Proposal, outcome: Outcome, candidate_id: str):
        task = self._task
        last_role = self._context[-1]["role"] if self._context else None
        if proposal.code is None:
            if last_role == "assistant" and task is not None:  # a reply came but was unusable
                self._append(
                    {
                        "role": "user",
                        "content": prompts.unusable_reply_feedback(
                            task, proposal.failure or "no program found"
                        ),
                    }
                )
            return  # no reply at all: the pending request is simply sent again
        fitness = outcome.fitness if outcome.passed else None
        record = {"id": candidate_id, "name": proposal.name, "fitness": fitness}
        best = self._best_record()
        if fitness is not None and (
            best is None or best["fitness"] is None or fitness > best["fitness"]
        ):
            best = record
        text = prompts.feedback_text(
            outcome,
            proposal.name,
            candidate_id,
            self._last,
            best,
            parent_label="your previous program",
        )
        follow = prompts.next_request(task) if task is not None else ""
        self._append({"role": "user", "content": (text + "\n\n" + follow).strip()})
        self._last = record
        self._last_feedback = text
        if fitness is not None:
            self._remember(
                {
                    **record,
                    "code": proposal.code,
                    "thought": proposal.thought,
                    "outcome": outcome.to_dict(),
                }
            )

    def _compact(self, request: ProposalRequest) -> None:
        """Restart the dialogue as [system, summary]; the summary keeps as many of the best
        programs as fit in about half the budget (at least one)."""
        task = request.task
        recent = self._last_feedback
        system = {"role": "system", "content": prompts.system_prompt(task)}
        programs = self._summary_programs(request)
        while True:
            summary = prompts.conversation_summary(task, programs, recent, request.guidance)
            size = _estimate_tokens([system, {"role": "user", "content": summary}])
            if len(programs) <= 1 or size <= self.history_token_budget // 2:
                break
            programs = programs[:-1]
        self._context = []
        self._compactions += 1
        self._append(system)
        self._append({"role": "user", "content": summary})

    def _summary_programs(self, request: ProposalRequest) -> list[ParentInfo]:
        known = [
            ParentInfo(
                id=p["id"],
                code=p["code"],
                name=p.get("name") or "",
                thought=p.get("thought") or "",
                fitness=p.get("fitness"),
                outcome=Outcome.from_dict(p["outcome"]) if p.get("outcome") else None,
            )
            for p in self._top
        ]
        archived = [
            *([request.best] if request.best else []),
            *request.inspirations,
            *request.parents,
        ]
        programs = _unique([*known, *archived])
        programs.sort(key=lambda p: -(p.fitness if p.fitness is not None else float("-inf")))
        return programs[:TOP_KEPT]

    def _remember(self, record: dict) -> None:
        self._top = [t for t in self._top if t["id"] != record["id"]] + [record]
        self._top.sort(key=lambda t: -(t["fitness"] if t["fitness"] is not None else -1e30))
        self._top = self._top[:TOP_KEPT]

    def _best_record(self) -> dict | None:
        best = self._pending_best
        candidates = list(self._top)
        if best is not None and best.fitness is not None:
            candidates.append({"id": best.id, "name": best.name, "fitness": best.fitness})
        candidates = [c for c in candidates if c.get("fitness") is not None]
        return max(candidates, key=lambda c: c["fitness"]) if candidates else None

    def _append(self, message: dict[str, str]) -> None:
        self._context.append(message)
        self._undrained.append(message)

    # -- one exchange with repairs ---------------------------------------------------------
    def _exchange(
        self,
        messages: list[dict[str, str]],
        request: ProposalRequest,
        operator: str,
        parent_code: str | None,
    ) -> tuple[Proposal, list[dict]]:
        """Ask, parse, and repair once if needed. Returns the proposal and the dialogue
        messages added after `messages` (assistant replies and repair requests)."""
        task = request.task
        calls: list[LLMCall] = []
        added: list[dict[str, str]] = []
        model = None
        problem = "no reply"
        for round_ in range(1 + self.repair_rounds):
            self._count_call()
            call = self.client.chat(messages + added, model=model, request_seed=request.rng_seed)
            calls.append(call)
            self._add_cost(call)
            model = call.model
            if call.reply is None:  # a transport fault, already retried by the client
                return self._failed(f"LLM call failed: {call.error}", calls, operator), added
            if not call.reply.strip():
                problem = "the reply was empty"
                continue  # resend the same request: there is nothing to repair
            added.append({"role": "assistant", "content": call.reply})
            try:
                extraction, used = self._parse(
                    call.reply, task.function_name, operator, parent_code
                )
            except ExtractionError as error:
                problem = str(error)
                if round_ < self.repair_rounds:
                    added.append(
                        {
                            "role": "user",
                            "content": prompts.repair_prompt(
                                task, problem, diff=operator == "diff"
                            ),
                        }
                    )
                    parent_code = None if operator == "diff" else parent_code
                    operator = "rewrite" if operator == "diff" else operator
                continue
            return Proposal(
                code=extraction.code,
                name=extraction.name,
                thought=extraction.thought,
                proposer=f"llm:{call.model}",
                operator=used,
                calls=calls,
            ), added
        return self._failed(f"no usable program in the reply: {problem}", calls, operator), added

    def _parse(
        self, reply: str, fn: str, operator: str, parent_code: str | None
    ) -> tuple[Extraction, str]:
        if operator != "diff" or parent_code is None:
            return extract(reply, fn), operator
        diff_text, thought, name = reply, "", ""
        for _method, obj in json_objects(reply):
            if isinstance(obj.get("diff"), str):
                diff_text = obj["diff"]
                thought, name = str(obj.get("thought") or ""), str(obj.get("name") or "")
                break
        if has_blocks(diff_text):
            try:
                code = apply_diff(parent_code, diff_text)
            except DiffError as error:
                try:  # graceful fallback: a full program elsewhere in the same reply
                    return extract(strip_blocks(reply), fn), "rewrite"
                except ExtractionError:
                    raise ExtractionError(str(error)) from None
            problem = check_code(code, fn)
            if problem:
                raise ExtractionError(f"after applying your SEARCH/REPLACE blocks: {problem}")
            return Extraction(code, thought.strip(), clean_name(name), "diff"), "diff"
        return extract(reply, fn), "rewrite"  # a full program instead of a diff

    def _failed(self, reason: str, calls: list[LLMCall], operator: str) -> Proposal:
        model = calls[-1].model if calls else ""
        return Proposal(
            code=None, failure=reason, proposer=f"llm:{model}", operator=operator, calls=calls
        )

    def _count_call(self) -> None:
        with _counter_lock:
            self._calls += 1

    def _add_cost(self, call: LLMCall) -> None:
        if call.cost_usd:
            with _counter_lock:
                self._cost += call.cost_usd


_counter_lock = threading.Lock()


def _baseline(fitnesses: list[float | None], best: ParentInfo | None) -> float | None:
    """What a child must beat to improve: its best parent's training fitness, else (no parent
    with one) the incumbent's; None when neither is known."""
    known = [f for f in fitnesses if f is not None]
    if known:
        return max(known)
    return best.fitness if best is not None else None


def _unique(programs: list[ParentInfo]) -> list[ParentInfo]:
    seen, out = set(), []
    for p in programs:
        if p is not None and p.id not in seen:
            seen.add(p.id)
            out.append(p)
    return out


def _estimate_tokens(messages: list[dict[str, str]]) -> int:
    return sum(len(m.get("content") or "") // 4 + 4 for m in messages)
