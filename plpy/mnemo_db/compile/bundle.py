"""The decide phase: from what the compile read and planned, the context bundle
(messages, phantom tools, report). Each step is a function of what the steps before
it produced; none changes what it is given (the items are made here, and packing
marks their chosen fidelities).

Invariants (checked by tests/py/db/test_context_properties.py):
- the tokens of the returned messages never exceed the budget B;
- the system prompt is present when the session has one; pinned memories are kept;
- nothing with sensitivity `secret` is sent, and channels see only what they may;
- an assistant message with tool_calls is always followed by all its tool results;
- kept history is a contiguous suffix of the session, and its fidelity never rises
  going back in time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from .. import tokens
from ..timestamps import said_day_at_end
from .history import HistoryPick, PreparedHistory, pack_history
from .packing import (
    DAY_LINE_TOKENS,
    MEMORY_HEADER_TOKENS,
    Item,
    Option,
    candidate_item,
    count_lines,
    full_options,
    line_tokens,
    memory_block,
    memory_block_tokens,
    pack_items,
)
from .policy import (
    CHANNEL_EXCLUDED_KINDS,
    CHANNEL_SENSITIVITY,
    FIDELITIES,
    PHANTOM_TOOLS,
    SUMMARY_HEADER,
    relevance_of,
    score,
)
from .updates import with_earlier

if TYPE_CHECKING:
    from .phases import Plan, Session


def visible_candidates(candidates: list[dict], channel: str) -> tuple[list[dict], list[dict]]:
    """The candidates the channel may see, and an omission for each other one."""
    allowed = CHANNEL_SENSITIVITY[channel]
    excluded_kinds = CHANNEL_EXCLUDED_KINDS.get(channel, ())
    visible, omissions = [], []
    for c in candidates:
        if c["sensitivity"] not in allowed:
            omissions.append({"source": c["source"], "reason": f"sensitivity_{c['sensitivity']}"})
        elif c["kind"] in excluded_kinds:
            omissions.append({"source": c["source"], "reason": f"kind_not_on_{channel}_channel"})
        else:
            visible.append(c)
    return visible, omissions


# Memories that gather many turns (a compaction's summary; a digest of the facts said
# across sessions, lifecycle/digests.py) say more than any one of them: one relevant
# turn among theirs does not make the whole relevant, so they keep their own relevance
# (measured on digests, issue 42: with their best turn's, they took the place of the
# turns at 512 tokens, LongMemEval multi-session evidence 0.883 -> 0.642).
GATHERING_KINDS = frozenset(["summary"])


def noted_relevance(visible: list[dict], relevance: list[float]) -> list[float]:
    """Each candidate's relevance, a memory's at least that of the candidate turns it
    was written from (derived_from): a note says what its turn said, and the turn's
    relevance also holds where it was said (its neighbours, the part of the
    conversation about the question: retrieval.fuse_candidates), which the note read
    alone cannot show. Packing then takes the cheaper of the two per token; when both
    enter, the note stands in for the turn when it says what made the turn relevant
    in fewer tokens (stand_ins), else it goes (repeats_block). A memory of
    GATHERING_KINDS keeps its own."""
    of = {c["source"]: r for c, r in zip(visible, relevance) if c["source"].startswith("msg:")}
    return [r if c.get("kind") in GATHERING_KINDS else max([r] + [of[m] for m in c.get("derived_from") or () if m in of])
            for c, r in zip(visible, relevance)]


def without_said_day(c: dict) -> dict:
    """A memory whose text closes with the day it was said (timestamps.said_suffix),
    that day being the one its line goes under (the block's day line:
    packing.memory_lines), without it there: the block says each day once. Its stored
    token counts are then counted again."""
    said = said_day_at_end(c["text"]) if c["source"].startswith("mem:") and c.get("created_at") else None
    if said is None or said[1] != c["created_at"].date():
        return c
    return {**c, "text": c["text"][:said[0]], "text_tokens": None}


def candidate_items(visible: list[dict], weights: dict, now: datetime, previous_fidelity: dict[str, str],
                    line_counter: Callable[[list[str]], list[int]]) -> list[Item]:
    """Every visible candidate as an Item with all its fidelity options (packing then
    only chooses), most valuable first: the one scoring that packs (Item.value),
    caps the items and ranks them in the report, so the ranked list and the context
    agree."""
    max_access = max((c.get("access_count") or 0 for c in visible), default=0)
    relevance = noted_relevance(visible, [relevance_of(c, weights) for c in visible])
    scored = sorted(((score(c, weights, now, max_access, r), r, c) for c, r in zip(visible, relevance)),
                    key=lambda src: (-src[0], src[2]["source"]))
    best = max(relevance, default=0.0)
    scored = [(s, r, with_earlier(without_said_day(c))) for s, r, c in scored]
    fulls, label_n = full_options([c for _, _, c in scored], line_counter)
    items = [candidate_item(c, s, r, weights, best, o, n, previous_fidelity.get(c["source"]))
             for (s, r, c), o, n in zip(scored, fulls, label_n)]
    return sorted(items, key=lambda i: (-i.value, i.source))


def restored_memories(items: list[Item], restored: frozenset[str]) -> None:
    """Memories memory_restore brought back are pinned at full fidelity while their
    pin lasts (paging: the thrash guard)."""
    for it in items:
        if it.source in restored:
            it.pinned, it.options = True, it.options[:1]


def paging_report(plan: Plan) -> dict:
    p = plan.paging
    return {"zone": p.zone, "history_tokens": p.tokens, "changes": len(p.changes),
            "evicted_units": p.evicted_units}


def evicted_sources(prepared: PreparedHistory) -> set[str]:
    """The history's messages that paging evicted."""
    if prepared.floors is None:
        return set()
    return {f"msg:{m['message_id']}" for unit, f in zip(prepared.units, prepared.floors) if f == len(FIDELITIES)
            for m in unit}


def paged_tool_sources(plan: Plan) -> set[str]:
    """The history's tool calls and outputs that paging holds below full (its waste
    rules and zones decided what of them the model needs). Conversation is left out:
    a goal shift demotes old phases, and a memory of one may say what the question
    asks more briefly than the demoted turn."""
    prepared, p = plan.prepared, plan.paging
    if prepared.floors is None or p is None:
        return set()
    return {f"msg:{m['message_id']}" for u in p.tool_units if prepared.floors[u] > 0 for m in prepared.units[u]}


def pinned_reserve(items: list[Item]) -> int:
    """Tokens kept for the pinned items before the history takes its share: their
    cheapest lines, the block header and a day line each at most."""
    pinned = [i for i in items if i.pinned]
    if not pinned:
        return 0
    return MEMORY_HEADER_TOKENS + sum(i.options[-1].tokens + DAY_LINE_TOKENS for i in pinned)


def pinned_block(items: list[Item]) -> int:
    """Tokens of a block of the pinned items alone at full fidelity: the block header
    and a day line each at most."""
    pinned = [i for i in items if i.pinned]
    return MEMORY_HEADER_TOKENS + sum(i.options[0].tokens + DAY_LINE_TOKENS for i in pinned) if pinned else 0


def memory_limit(plan: Plan, items: list[Item], available: int) -> int:
    """The memory block's limit: the plan's; a default cap (the call named no budget)
    raised, within B, to what the pinned items take at full fidelity: it bounds what
    ranking adds, not what a user pinned."""
    if not plan.default_cap:
        return plan.memory_limit
    return max(plan.memory_limit, min(pinned_block(items), available))


def history_pick(prepared: PreparedHistory, budget: int, summary_text: str | None
                 ) -> tuple[HistoryPick, list[dict], int]:
    """The history packed within a budget, and the session summary (messages, tokens)
    in front of it when history was dropped and the summary fits: the history is then
    packed again in what the summary leaves."""
    pick = pack_history(prepared, budget)
    if pick.dropped_units and summary_text:
        summary = {"role": "system", "content": SUMMARY_HEADER + "\n" + summary_text}
        summary_tokens = tokens.count_message(summary)
        if summary_tokens < budget:
            return pack_history(prepared, budget - summary_tokens), [summary], summary_tokens
    return pick, [], 0


def history_sources(pick: HistoryPick) -> set[str]:
    return {f"msg:{mid}" for mid, _, _ in pick.fidelities}


def verbatim_sources(pick: HistoryPick) -> set[str]:
    """The history's messages sent whole (full fidelity)."""
    return {f"msg:{mid}" for mid, fid, _ in pick.fidelities if fid == "full"}


def repeats_history(items: list[Item], derived_from: dict[str, frozenset[str]], covered: set[str]) -> set[str]:
    """The memories formed only from messages the history covers, pinned ones aside:
    sent whole (the block would say again what the model reads a few lines below: a
    coding session's file and tool-output memories, all of whose sources are still in
    the window), or held lower by paging (paging decided what of them the model needs;
    the memory would undo its decision, and memory_restore brings them back).
    derived_from: each memory's source messages (msg:N)."""
    return {i.source for i in items
            if not i.pinned and derived_from.get(i.source) and derived_from[i.source] <= covered}


def repeats_block(chosen: list[Item], derived_from: dict[str, frozenset[str]]) -> set[str]:
    """The chosen memories, pinned ones aside, all of whose source messages the block
    also holds whole: the block would say the same thing twice (a recalled turn and
    the note made of it). The turn
    stays: it is what was said, under its own day line; the note only restates it
    (unless the note stands in for it: stand_ins)."""
    whole = {i.source for i in chosen if i.source.startswith("msg:") and i.options[i.chosen].fidelity == "full"}
    return repeats_history(chosen, derived_from, whole)


def stands_for_suffix(turns: list[str]) -> str:
    """What a memory's line ends with when it stands in for turns: their ids, which
    memory_restore brings back whole ("... (msg:456)")."""
    return f" ({', '.join(turns)})"


def stand_ins(items: list[Item], chosen: list[Item], derived_from: dict[str, frozenset[str]],
              match: dict[str, float | None]) -> dict[str, tuple[list[str], list[Option]]]:
    """The memories offered to the block (items) that stand in for chosen turns they
    were extracted from: memory source -> (the turns, the memory's options with the
    turns' ids at the end of each line: stands_for_suffix).

    A memory says what made its turn relevant when its own match to the query is at
    least the turn's: `match`, each candidate's content match (retrieval.fuse_candidates:
    cosine and BM25, tag and date bonuses; a user turn's best sentence,
    match_sentences) before what it borrows (a turn's neighbours, nearby turns and
    length; a memory's source turns: noted_relevance). Where the turn matches better,
    it holds something the note left out, and the turn stays. A memory that passes
    stands in for those of its source turns in the block whose match it reaches, when
    its line (at its chosen fidelity, else full), their ids added, costs fewer tokens
    than theirs at the fidelities chosen:
    the block then says the same in fewer tokens, and the turn is one memory_restore
    away. A turn has one stand-in, the best matching memory (then the cheaper, the
    lower id). No constant is involved: both sides are the compile's own signals."""
    turns = {i.source: i for i in chosen if i.source.startswith("msg:")}
    offers = []
    for m in items:
        own = match.get(m.source)
        if not m.source.startswith("mem:") or own is None:
            continue
        reached = sorted(t for t in derived_from.get(m.source, ()) & turns.keys()
                         if match.get(t) is not None and own >= match[t])
        if reached:
            offers.append((-own, m.options[m.chosen or 0].tokens, m.source, m, reached))
    out: dict[str, tuple[list[str], list[Option]]] = {}
    taken: set[str] = set()
    for _, _, _, m, reached in sorted(offers, key=lambda o: o[:3]):
        ts = [t for t in reached if t not in taken]
        if not ts:
            continue
        suffix = stands_for_suffix(ts)
        options = [Option(o.fidelity, o.text + suffix, line_tokens(o.text + suffix)) for o in m.options]
        if options[m.chosen or 0].tokens < sum(turns[t].options[turns[t].chosen].tokens for t in ts):
            out[m.source] = (ts, options)
            taken.update(ts)
    return out


def standing(m: Item, options: list[Option], turns: list[Item]) -> Item:
    """A memory as it stands in for turns: its lines naming them, and worth at least
    what they were (it carries what made them relevant: stand_ins), so packing again
    keeps it where it kept them."""
    return replace(m, options=options, value=max([m.value] + [t.value for t in turns]), chosen=None)


# Packings of the memory block at most: each may choose new turns that make more notes
# repeat them, and few are left after three
BLOCK_PACKINGS = 3


def pack_block(items: list[Item], budget: int, order: Callable[[Item], tuple],
               derived_from: dict[str, frozenset[str]], match: dict[str, float | None] | None = None
               ) -> tuple[list[Item], list[Item], set[str], dict[str, str]]:
    """pack_memories, packed again without the turns a memory stands in for
    (stand_ins; the memory's line then names them) and without the notes that
    repeats_block finds, so their tokens go to other candidates: (the items still
    offered, the chosen, the repeats, turn -> the memory standing in for it).
    match: each candidate's own match to the query (none: no stand-ins)."""
    repeated: set[str] = set()
    stood: dict[str, str] = {}
    chosen = pack_memories(items, budget, order)
    for _ in range(BLOCK_PACKINGS - 1):
        standing_in = stand_ins(items, chosen, derived_from, match) if match else {}
        now_stood = {t: m for m, (ts, _) in standing_in.items() for t in ts}
        # the notes that repeat the turns the block keeps
        twice = repeats_block([i for i in chosen if i.source not in now_stood], derived_from)
        if not twice and not standing_in:
            break
        repeated |= twice
        stood |= now_stood
        by_source = {i.source: i for i in items}
        left = set(stood) | twice
        items = [standing(i, standing_in[i.source][1], [by_source[t] for t in standing_in[i.source][0]])
                 if i.source in standing_in else i for i in items if i.source not in left]
        chosen = pack_memories(items, budget, order)
    return items, chosen, repeated, stood


def stood_in_omissions(stood: dict[str, str], chosen: list[Item], in_history: set[str]) -> list[dict]:
    """The report's omission for each turn a memory stood in for (pack_block): reason
    `stood_in`, with the memory that carries it, which the block holds; a turn whose
    memory did not stay (B made drop_to_fit drop it) was left out for the budget, and
    one the wider history now holds is no omission."""
    kept = {i.source for i in chosen}
    return [{"source": t, "reason": "stood_in", "stood_in_by": m} if m in kept
            else {"source": t, "reason": "budget"}
            for t, m in sorted(stood.items()) if t not in in_history]


def memory_candidates(items: list[Item], in_history: set[str], max_items: int | None) -> list[Item]:
    """The items that may enter the memory block: not in the history (a message, or a
    memory that repeats it), and within the items cap (pinned ones first)."""
    items = [i for i in items if i.source not in in_history]
    if max_items is None:
        return items
    pinned = [i for i in items if i.pinned]
    return pinned + [i for i in items if not i.pinned][: max(max_items - len(pinned), 0)]


def block_order(previous: list[tuple[str, str]]) -> Callable[[Item], tuple]:
    """The memory block's order: items of the previous context keep their places, new
    ones follow in time order, so consecutive contexts share the longest prefix."""
    rank = {src: i for i, (src, _) in enumerate(previous)}

    def key(i: Item) -> tuple:
        ts = i.created_at
        return (rank.get(i.source, len(rank)), ts.timestamp() if ts else 0.0, i.source)

    return key


def pack_memories(items: list[Item], budget: int, order: Callable[[Item], tuple]) -> list[Item]:
    """The items packing keeps within a memory budget (greedy knapsack over
    fidelities, within what the block header leaves), in block order."""
    if items and budget > MEMORY_HEADER_TOKENS:
        pack_items(items, budget - MEMORY_HEADER_TOKENS)
    return sorted((i for i in items if i.chosen is not None), key=order)


def drop_to_fit(chosen: list[Item], room: int, limit: int) -> tuple[list[Item], int]:
    """The chosen items, least valuable first out, until the block fits both the room
    the history leaves in B and its own limit (B is a hard limit, and packing did not
    count the block's day lines); with the block's tokens. Unpinned items go first;
    B outranks even a pinned item."""
    kept = list(chosen)
    used = memory_block_tokens(kept)
    while kept and (used > room or used > limit):
        kept.remove(min(kept, key=lambda i: (i.pinned, i.value, i.source)))
        used = memory_block_tokens(kept)
    return kept, used


def omissions_after(items: list[Item], chosen: list[Item], in_history: set[str], pick: HistoryPick,
                    summary: list[dict], history: list[dict], plan_floors: list[int] | None = None) -> list[dict]:
    """What was left out for the budget (items, dropped history) and the tool outputs
    the history holds truncated."""
    kept = {id(i) for i in chosen}
    out = [{"source": it.source, "reason": "budget", "score": round(it.score, 6)}
           for it in items if id(it) not in kept and it.source not in in_history]
    if pick.dropped_units:
        out.append({"source": "history", "reason": "budget", "units_dropped": pick.dropped_units,
                    "covered_by_summary": bool(summary)})
    evicted = sum(1 for f in (plan_floors or ()) if f == len(FIDELITIES))
    if evicted:
        out.append({"source": "history", "reason": "evicted", "units": evicted})
    out.extend({"source": f"msg:{m['message_id']}", "reason": "truncated_tool_output",
                "artifact_id": m["artifact_id"]} for m in history if m.get("artifact_id"))
    return out


def report_items(chosen: list[Item], pick: HistoryPick, rank: dict[str, int]) -> list[dict]:
    """The report's items; a memory item's rank is its place by value among the
    candidates (1: the most valuable), its score the score of docs/design.md §Scoring."""
    return (
        [{"section": "memory", "source": i.source, "kind": i.kind,
          "fidelity": i.options[i.chosen].fidelity, "tokens": i.options[i.chosen].tokens,
          "score": round(i.score, 6), "rank": rank[i.source], "pinned": i.pinned} for i in chosen]
        + [{"section": "history", "source": f"msg:{mid}", "fidelity": fid, "tokens": t}
           for mid, fid, t in pick.fidelities]
    )


def retriever_counts(candidates: list[dict]) -> dict:
    counts: dict[str, int] = {}
    for c in candidates:
        for r in c.get("retrievers") or ():
            counts[r] = counts.get(r, 0) + 1
    return dict(sorted(counts.items()))


def decide(session: Session, history: list[dict], plan: Plan, candidates: list[dict],
           previous: list[tuple[str, str]], query: str | None, recall_scope: dict | None = None,
           line_counter: Callable[[list[str]], list[int]] = count_lines) -> dict:
    """The context bundle: messages, phantom tools and the report (without ids).
    previous: the session's previous context's memory items (source, fidelity), in
    their order. recall_scope: the report's account of it (phases.recall_scope).
    line_counter counts the full lines of candidates without stored text_tokens
    (count_lines, or an equivalent that counts on two threads)."""
    opts, budget, weights = session.options, session.budget, session.weights
    available = budget.available

    # Candidates: privacy, scoring, every fidelity option
    visible, hidden = visible_candidates(candidates, opts["channel"])
    all_items = candidate_items(visible, weights, session.now, dict(previous), line_counter)
    if plan.paging is not None:
        restored_memories(all_items, plan.paging.restored_memories)

    # History within its share, less the pinned items' reserve (plus whatever memories leave)
    b_hist = max(min(plan.history_share, available - pinned_reserve(all_items)), 0)
    pick, summary, summary_tokens = history_pick(plan.prepared, b_hist, session.summary_text)
    derived = {c["source"]: c["derived_from"] for c in visible if c.get("derived_from")}
    paged = paged_tool_sources(plan)
    repeated = repeats_history(all_items, derived, verbatim_sources(pick) | paged)
    in_history = history_sources(pick) | repeated

    # Memories within B - history, greedy knapsack over fidelities; an evicted turn of
    # this session is not recalled either (paging: memory_query and memory_restore reach it)
    items = memory_candidates(all_items, in_history | evicted_sources(plan.prepared), opts["max_items"])
    limit = memory_limit(plan, all_items, available)
    mem_budget = min(available - pick.tokens - summary_tokens, limit)
    order = block_order(previous)
    match = {c["source"]: c.get("match") for c in visible} if weights["stand_in"] > 0 else None
    items, chosen, repeated_in_block, stood = pack_block(items, mem_budget, order, derived, match)

    # Unused memory budget flows back to history: packed again, wider, when the first
    # packing cut or degraded it (the memories are chosen by then; what the wider
    # history now holds leaves the block)
    mem_tokens = memory_block_tokens(chosen)
    degraded = any(f not in ("full", "withheld") for _, f, _ in pick.fidelities)
    if (pick.dropped_units or degraded) and opts["cap_history"] is None:
        wider = available - mem_tokens
        if wider > pick.tokens + summary_tokens:
            pick, summary, summary_tokens = history_pick(plan.prepared, wider, session.summary_text)
            repeated = repeats_history(all_items, derived, verbatim_sources(pick) | paged)
            in_history = history_sources(pick) | repeated
            chosen = [i for i in chosen if i.source not in in_history]

    chosen, mem_tokens = drop_to_fit(chosen, available - pick.tokens - summary_tokens, limit)
    stood_omissions = stood_in_omissions(stood, chosen, in_history)

    # Assemble
    used = mem_tokens + summary_tokens + pick.tokens
    return {
        "messages": (list(budget.system_messages) + ([memory_block(chosen)] if chosen else [])
                     + summary + pick.messages),
        "tools": PHANTOM_TOOLS if opts["phantom_tools"] else [],
        "report": {
            "task_type": plan.task,
            "channel": opts["channel"],
            "budget": {
                "context_window": session.context_window,
                "system_prompt": budget.system_tokens,
                "response_reserve": session.response_reserve,
                "tool_definitions": budget.tool_tokens,
                "available": available,
                "memory_share": plan.memory_share,
                "memory_limit": limit,
                "history_share": b_hist,
            },
            "tokens": {
                "system": budget.system_tokens,
                "memory": mem_tokens,
                "summary": summary_tokens,
                "history": pick.tokens,
                "total": used,
                "prompt": budget.system_tokens + used + budget.tool_tokens,
            },
            "items": report_items(chosen, pick, {i.source: k + 1 for k, i in enumerate(all_items)}),
            "omissions": hidden + [{"source": src, "reason": "repeats_history"} for src in sorted(repeated)]
            + [{"source": src, "reason": "repeats_block"} for src in sorted(repeated_in_block)]
            + stood_omissions
            + omissions_after(items, chosen, in_history, pick, summary, history, plan.prepared.floors),
            "provenance": {
                "query": query,
                "candidate_pool_size": len(candidates),
                "retrievers": retriever_counts(candidates),
                "sensitivity_allowed": list(CHANNEL_SENSITIVITY[opts["channel"]]),
                "scoring": {k: weights[k] for k in sorted(weights)},
                "history_first_turn": pick.first_kept_turn,
            } | ({"recall_scope": recall_scope} if recall_scope is not None else {}),
        } | ({"paging": paging_report(plan)} if plan.paging is not None else {}),
    }
