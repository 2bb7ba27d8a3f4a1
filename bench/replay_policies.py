"""bench/replay.py's policies: what each sends for a model call. ``stub8`` stubs every
tool result older than 8 calls (pichay-like), ``oracle`` stubs every tool result but the
previous call's unless the session re-reads it later (perfect foresight), ``mnemo``
records the session and compiles with mnemo.compile_context_bundle. Each also says,
for --show-faults, the fidelity a result not held in full was held at and the
compile's pressure zone."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from replay_faults import held_in

from mnemosyne.errors import MnemoError

if TYPE_CHECKING:
    from replay import Analysis, Call

STUB_AGE = 8  # the pichay-like baseline stubs tool results older than this many calls


class Policy:
    """Produces the messages sent for a model call (system prompt first)."""

    name = "policy"
    zone = "-"  # the pressure zone of the last context (paging's; '-': the policy has none)

    def start(self, analysis: Analysis, window: int) -> None:
        self.latencies_ms: list[float] = []

    def held_at(self, analysis: Analysis, sent: list[dict], i: int) -> str:
        """The fidelity the sent context holds message i at, which it does not hold in
        full: the naive policies keep every message, stubbing those they drop."""
        return "stub"

    def record(self, analysis: Analysis, call: Call) -> None:
        """Takes in the messages before the call (before the jobs run)."""

    def context(self, analysis: Analysis, call: Call) -> list[dict] | None:
        raise NotImplementedError


def _stub(m: dict, analysis: Analysis, i: int) -> dict:
    out = dict(m)
    out["content"] = f"[tool result elided: {analysis.tokens[i]} tokens]"
    return out


def _with_system(analysis: Analysis, msgs: list[dict]) -> list[dict]:
    sp = analysis.rec.system_prompt
    return ([{"role": "system", "content": sp}] if sp else []) + msgs


class StubOlderThan(Policy):
    """Every observation answering a call more than `age` calls back becomes a stub."""

    def __init__(self, age: int = STUB_AGE):
        self.age = age
        self.name = f"stub{age}"

    def context(self, analysis: Analysis, call: Call) -> list[dict]:
        msgs = analysis.rec.messages[:call.index]
        return _with_system(analysis, [
            _stub(m, analysis, i) if i in analysis.observations
            and call.number - analysis.observations[i].call > self.age else m
            for i, m in enumerate(msgs)])


class Oracle(Policy):
    """Perfect foresight: every observation but those of the previous call becomes a
    stub, unless a later call of the session re-reads it."""

    name = "oracle"

    def start(self, analysis: Analysis, window: int) -> None:
        super().start(analysis, window)
        self.reread: set[int] = set()
        for c in analysis.calls:
            for _, hits in analysis.rereads(c):
                self.reread.update(hits)

    def context(self, analysis: Analysis, call: Call) -> list[dict]:
        msgs = analysis.rec.messages[:call.index]
        return _with_system(analysis, [
            _stub(m, analysis, i) if i in analysis.observations and i not in self.reread
            and analysis.observations[i].call < call.number - 1 else m
            for i, m in enumerate(msgs)])


class Mnemosyne(Policy):
    """Records the session as it goes and compiles with mnemo.compile_context_bundle, in
    a tenant of its own for each (session, window)."""

    name = "mnemo"

    def __init__(self, db: Any, run: str):
        self.db, self.run = db, run
        self.serial = 0
        self.compile_errors = 0

    def start(self, analysis: Analysis, window: int) -> None:
        super().start(analysis, window)
        self.serial += 1
        self.tenant = f"replay-{self.run}-{window}-{self.serial}"
        self.db.create_tenant(self.tenant)
        params = {k: v for k, v in analysis.rec.params.items() if v is not None}
        params.pop("context_window", None)
        self.session = self.db.start_session(self.tenant, context_window=window,
                                             system_prompt=analysis.rec.system_prompt, **params)
        self.recorded = 0
        self.message_ids: dict[int, int] = {}  # recording index -> message_id

    def record(self, analysis: Analysis, call: Call) -> None:
        for i in range(self.recorded, call.index):
            e = analysis.rec.entries[i]
            self.message_ids[i] = self.db.record_message(self.tenant, self.session, e["message"],
                                                         created_at=e.get("created_at"),
                                                         metadata=e.get("metadata"))
        self.recorded = call.index

    def context(self, analysis: Analysis, call: Call) -> list[dict] | None:
        t0 = time.perf_counter()
        try:
            bundle = self.db.compile_context_bundle(self.tenant, self.session)
        except MnemoError as e:
            self.compile_errors += 1
            print(f"[replay] compile failed ({analysis.rec.name}, call {call.number}): {e}",
                  file=sys.stderr)
            return None
        self.latencies_ms.append((time.perf_counter() - t0) * 1000)
        self.zone = ((bundle.get("report") or {}).get("paging") or {}).get("zone") or "normal"
        return bundle["messages"]

    def held_at(self, analysis: Analysis, sent: list[dict], i: int) -> str:
        text = "\n".join(str(m.get("content") or "") for m in sent)
        return held_in(text, self.message_ids.get(i), analysis.rec.messages[i].get("tool_call_id"), sent)
