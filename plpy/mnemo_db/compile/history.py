"""The session's history in the context: units kept or dropped together (a tool
call with its results), each message at every fidelity with its exact cost, and the
packing of a contiguous suffix within a budget, older turns degrading before they
are dropped."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .. import tokens
from .levels import pending_levels
from .policy import FIDELITIES, HISTORY_ZONES


def group_history(history: list[dict]) -> list[list[dict]]:
    """Units that are kept or dropped together: an assistant message with tool_calls
    plus its tool results; every other message alone. Tool calls without a result and
    results without their call are left out (OpenAI rejects either)."""
    by_call: dict[str, dict] = {}
    for m in history:
        if m["role"] == "tool" and m.get("tool_call_id"):
            by_call.setdefault(m["tool_call_id"], m)
    units: list[list[dict]] = []
    consumed: set[int] = set()
    for m in history:
        if m["message_id"] in consumed:
            continue
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [tc for tc in m["tool_calls"] if tc.get("id") in by_call]
            results = [by_call[tc["id"]] for tc in calls]
            for r in results:
                consumed.add(r["message_id"])
            # A call without its result is not sent: the message is altered and its
            # stored token count no longer applies.
            altered = {} if len(calls) == len(m["tool_calls"]) else {"token_count": None}
            if calls:
                unit = [dict(m, tool_calls=calls, **altered)] + results
            elif m.get("content") or m.get("content_parts"):
                unit = [dict(m, tool_calls=None, token_count=None)]
            else:
                continue
            units.append(unit)
        elif m["role"] == "tool":
            continue  # a result without its call (or already placed with it)
        else:
            units.append([m])
    return units


def openai_message(m: dict, content: str | None = None) -> dict:
    """The OpenAI chat message for a history row, verbatim or with new content."""
    out: dict = {"role": m["role"]}
    if content is not None:
        out["content"] = content
    elif m.get("content_parts") is not None:
        out["content"] = m["content_parts"]
    else:
        out["content"] = m.get("content")
    if m.get("name") and m["role"] in ("user", "assistant", "system", "developer"):
        out["name"] = m["name"]
    if m["role"] == "assistant" and m.get("tool_calls"):
        out["tool_calls"] = m["tool_calls"]
    if m["role"] == "tool":
        out["tool_call_id"] = m["tool_call_id"]
    return out


WITHHELD = "[content withheld: sensitivity {s} is not allowed on this channel]"
# A tool call's string argument longer than this is cut to its first line (at most
# this long) when the call is sent at compact or stub: what an edit wrote or a script
# ran is done; the path, the range and the command's first line still say what it was.
ARGUMENT_KEEP_CHARS = 120


def abbreviated_calls(calls: list[dict], ref: str) -> list[dict]:
    """Tool calls with their long string arguments cut (ARGUMENT_KEEP_CHARS), naming
    the message memory_restore brings back whole. Ids and names stay (the results
    still pair up); arguments that are not a JSON object stay as the model wrote them."""
    out = []
    for tc in calls:
        fn = tc.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "")
        except (TypeError, ValueError, RecursionError):
            args = None
        if not isinstance(args, dict):
            out.append(tc)
            continue
        cut = {k: (v.split("\n", 1)[0][:ARGUMENT_KEEP_CHARS] + f" [... {len(v)} chars; memory_restore {ref}]"
                   if isinstance(v, str) and len(v) > ARGUMENT_KEEP_CHARS else v) for k, v in args.items()}
        out.append(tc if cut == args else
                   dict(tc, function=dict(fn, arguments=json.dumps(cut, ensure_ascii=False))))
    return out


# An assistant message whose text is at most this many tokens keeps its text at
# every level below full (bench-replay, the shared SWE-agent sessions: 250 of their
# 230 model turns are under 200 tokens; summarising them with the results they
# answer left the next turn without the names it used: 19 information misses of
# 233 where the oracle, which keeps every assistant turn, has 7).
ASSISTANT_KEEP_TOKENS = 200


def own_words(m: dict) -> bool:
    """Whether a message is the model's own short text (ASSISTANT_KEEP_TOKENS)."""
    text = m.get("content") or ""
    if m["role"] != "assistant" or not isinstance(text, str) or not text:
        return False
    # over 16 characters a token, a text is long whatever its count: no need to count it
    return len(text) <= 16 * ASSISTANT_KEEP_TOKENS and tokens.count(text) <= ASSISTANT_KEEP_TOKENS


def history_versions(m: dict, allowed: tuple[str, ...], output: bool = False
                     ) -> tuple[dict[str, dict], dict[str, int]]:
    """The message at each fidelity, and what each costs (tokens.count_message). A
    level the row does not have (it is too short to abbreviate), or one that would
    not be shorter, is the next higher level's message. A row whose sensitivity the
    channel may not see is a placeholder at every level (its role and tool-call id
    stay, so tool-call pairs stay whole). A row sent as stored costs its stored token
    count (the same count of the same message); each other message is counted once."""
    if m["sensitivity"] not in allowed:
        # Nothing of the row but its shape: no name, and tool calls keep their ids
        # and function names (the results must still pair up) but not their arguments.
        msg = openai_message(dict(m, name=None), WITHHELD.format(s=m["sensitivity"]))
        if msg.get("tool_calls"):
            msg["tool_calls"] = [
                {"id": tc["id"], "type": "function",
                 "function": {"name": tc["function"]["name"], "arguments": "{}"}}
                for tc in msg["tool_calls"]]
        return dict.fromkeys(FIDELITIES, msg), dict.fromkeys(FIDELITIES, tokens.count_message(msg))
    above = openai_message(m)
    above_cost = m["token_count"] if m.get("token_count") is not None else tokens.count_message(above)
    versions, costs = {"full": above}, {"full": above_cost}
    # the model's own short turn keeps its words below full (the arguments of its
    # calls are still cut): what an agent said it saw, chose or will do is what its
    # next turns refer to, and a summary of 100 tokens saves little and loses that
    levels = None if own_words(m) else (m.get("levels") or pending_levels(m))
    ref = f"msg:{m['message_id']}"
    # cut once: cutting the cut arguments again would count their cut length
    short_calls = abbreviated_calls(above["tool_calls"], ref) if above.get("tool_calls") else None
    for name in ("detail", "compact", "stub"):
        lv = (levels or {}).get(name)
        if lv:
            # a stub is a line: its pointer as short as it can be (the phantom tool's
            # description says what memory_restore brings back)
            where = (f"full output in artifact {m['artifact_id']}" if m.get("artifact_id")
                     else "memory_restore" if name == "stub" else "memory_restore for the full text")
            # a tool's output (output: paging's objects say which) is stubbed by its
            # pointer alone: the call that made it stands before it, its arguments
            # say what it was (the SWE-agent sessions' stubs, a description and a date
            # each, cost 3x the oracle's "[tool result elided]")
            msg = openai_message(m, f"[{name} of {ref}; {where}]" if output and name == "stub"
                                 else f"[{name} of {ref}; {where}] {lv['text']}")
            cost = tokens.count_message(msg)
            if cost < above_cost:
                above, above_cost = msg, cost
        if name != "detail" and short_calls is not None and above["tool_calls"] is not short_calls:
            msg = dict(above, tool_calls=short_calls)
            cost = tokens.count_message(msg)
            if cost < above_cost:
                above, above_cost = msg, cost
        versions[name], costs[name] = above, above_cost
    return versions, costs


def authored_versions(m: dict, object_id: int, summary: str, carrier: bool
                      ) -> tuple[dict[str, dict], dict[str, int]]:
    """A message of an object the assistant summarised (the summarize or collapse
    cleanup tag): below full, the object's largest message carries the summary and
    the others a pointer to it (roles, tool calls and their ids stay: pairs stay whole)."""
    full = openai_message(m)
    full_cost = m["token_count"] if m.get("token_count") is not None else tokens.count_message(full)
    text = (f"[summary of obj:{object_id}; memory_restore obj:{object_id} for the full text] {summary}"
            if carrier else f"[part of obj:{object_id}, summarised with it]")
    short = openai_message(m, text)
    cost = tokens.count_message(short)
    if cost >= full_cost:
        short, cost = full, full_cost
    versions, costs = {"full": full}, {"full": full_cost}
    for name in FIDELITIES[1:]:
        versions[name], costs[name] = short, cost
    return versions, costs


@dataclass
class HistoryPick:
    messages: list[dict]
    fidelities: list[tuple[int, str, int]]  # (message_id, fidelity, tokens), oldest first
    tokens: int
    dropped_units: int
    first_kept_turn: int | None


class PreparedHistory:
    """The history made ready once per compile (packing runs up to three times): its
    units, and each message's versions and token costs, computed lazily — a long
    history is mostly never looked at below full fidelity, and summarising or
    counting what packing never reaches is wasted time on the hot path."""

    def __init__(self, history: list[dict], allowed: tuple[str, ...]):
        self.units = group_history(history)
        self.allowed = allowed
        # Paging (mnemo_db.paging.residency): each unit's fidelity floor, the index of
        # its object's residency in FIDELITIES, len(FIDELITIES) for evicted; None: the
        # session has no semantic objects, and packing is by age alone.
        self.floors: list[int] | None = None
        # Paging: messages of objects an assistant summarised (a cleanup tag), by id:
        # (object id, summary, whether it carries the summary)
        self.authored: dict[int, tuple[int, str, bool]] = {}
        # Paging: the messages that are a tool's output (a tool message, or the
        # environment's answer to an action written in text), by id: their stub is a
        # pointer alone (history_versions)
        self.outputs: set[int] = set()
        self._versions: dict[int, list[tuple[dict[str, dict], dict[str, int]]]] = {}
        self._picks: dict[int, HistoryPick] = {}  # pack_history by budget (read only)
        # Full-fidelity cost of each unit: the stored token counts unless the unit's
        # messages are sent altered (withheld, or tool calls without results removed).
        self.stored = [self._as_stored(unit) for unit in self.units]
        self.full_costs = [
            sum(m["token_count"] for m in unit) if stored else sum(c["full"] for c in self.costs(u))
            for u, (unit, stored) in enumerate(zip(self.units, self.stored))
        ]

    def _as_stored(self, unit: list[dict]) -> bool:
        return all(m.get("token_count") is not None and m["sensitivity"] in self.allowed
                   for m in unit)

    def _prepared(self, u: int) -> list[tuple[dict[str, dict], dict[str, int]]]:
        if u not in self._versions:
            self._versions[u] = [
                authored_versions(m, *self.authored[m["message_id"]])
                if m["message_id"] in self.authored and m["sensitivity"] in self.allowed
                else history_versions(m, self.allowed, m["message_id"] in self.outputs) for m in self.units[u]]
        return self._versions[u]

    def mark_outputs(self, message_ids: set[int]) -> None:
        """Paging's tool outputs (their stub is a pointer alone): the versions a unit
        sent altered was prepared with before this was known are made again."""
        self.outputs = message_ids
        self._versions.clear()

    def costs(self, u: int) -> list[dict[str, int]]:
        """Token cost of each message of unit u at every fidelity."""
        return [c for _, c in self._prepared(u)]

    def at(self, u: int, fidelity: str) -> list[tuple[dict, int]]:
        """Each message of unit u at a fidelity, with its cost. A unit sent as stored
        needs no other version (most of a history is: its levels are not counted)."""
        if fidelity == "full" and self.stored[u]:
            return [(openai_message(m), m["token_count"]) for m in self.units[u]]
        return [(v[fidelity], c[fidelity]) for v, c in self._prepared(u)]

    def cost(self, u: int, z: int) -> int:
        """Token cost of unit u at fidelity zone z."""
        if z == 0:
            return self.full_costs[u]
        fidelity = FIDELITIES[z]
        return sum(c[fidelity] for _, c in self._prepared(u))


def pack_history(h: PreparedHistory, budget: int) -> HistoryPick:
    """A contiguous suffix of the history within the budget.

    If everything fits verbatim, everything is kept verbatim. Otherwise, walking back
    from the newest unit, units are placed in fidelity zones (HISTORY_ZONES, with
    cumulative caps): when a unit no longer fits in its zone, it and every older unit
    go one zone down, so older turns degrade before they are dropped and fidelity
    never rises going back in time. The newest unit is verbatim whenever it fits.
    With paging (h.floors), a unit is never sent above its object's residency and an
    evicted one not at all: if the history fits at the floors, the floors are the
    fidelities (a paged history is not contiguous, and its fidelity may rise going
    back in time); if not, the walk above runs with each unit at least at its floor.
    Memoised per budget on h: the candidate pool is sized with the same packing that
    the decide phase then does (phases.plan, bundle.decide).
    """
    if budget in h._picks:
        return h._picks[budget]
    units = h.units
    caps, acc = [], 0.0
    for _, share in HISTORY_ZONES:
        acc += share
        caps.append(int(budget * acc))
    caps[-1] = budget
    floors = h.floors or [0] * len(units)
    evicted = len(FIDELITIES)
    if sum(h.cost(u, f) for u, f in enumerate(floors) if f < evicted) <= budget:
        zones = list(floors)
    else:
        zones, used, z = [], 0, 0
        for idx in range(len(units) - 1, -1, -1):
            floor = floors[idx]
            if floor == evicted:
                zones.append(evicted)
                continue
            newest = idx == len(units) - 1
            zz = max(z, floor)
            while zz < evicted:
                cap = budget if newest and zz == 0 else caps[zz]
                if used + h.cost(idx, zz) <= cap:
                    break
                zz += 1
            if zz == evicted:
                break
            if zz > floor:
                z = max(z, zz)  # what the budget forced goes for every older unit too
            used += h.cost(idx, zz)
            zones.append(zz)
        zones.reverse()
    dropped = len(units) - len(zones)
    messages, fids, used = [], [], 0
    for u, z in zip(range(dropped, len(units)), zones):
        if z == evicted:
            continue
        fid = FIDELITIES[z]
        for m, (version, cost) in zip(units[u], h.at(u, fid)):
            label = "withheld" if m["sensitivity"] not in h.allowed else fid
            messages.append(version)
            fids.append((m["message_id"], label, cost))
            used += cost
    first = next((dropped + k for k, z in enumerate(zones) if z != evicted), len(units))
    first_turn = units[first][0]["turn_index"] if first < len(units) else None
    pick = h._picks[budget] = HistoryPick(messages, fids, used, dropped, first_turn)
    return pick


def verbatim_message_ids(history: list[dict], b_hist: int) -> list[int]:
    """Ids of the newest messages that will surely be sent verbatim (they fit in the
    full-fidelity zone of the history share): no need to retrieve them as memories."""
    ids, acc = [], 0
    for m in reversed(history):
        acc += m["token_count"]
        if acc > b_hist * HISTORY_ZONES[0][1]:
            break
        ids.append(m["message_id"])
    return ids
