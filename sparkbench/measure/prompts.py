"""Prompts of real text, varied per request so prefix caching cannot reuse one, and the request
body a phase sends."""
from __future__ import annotations

import json
import random

from .shapes import ChatMessage, ChatRequest

TOPICS = [
    "how a lighthouse keeper's work changed when lamps were electrified",
    "the way bees find flowers and tell the hive where they are",
    "why bread dough rises and what bakers do to control it",
    "how a river shapes its valley over thousands of years",
    "the history of mechanical clocks and the escapement",
    "how sailors navigated across oceans before satellites",
    "what happens inside a volcano before it erupts",
    "how a city water supply is cleaned and delivered to homes",
    "the life cycle of a forest after a wildfire",
    "how printing with movable type spread across Europe",
    "why the sky is blue at noon and red at sunset",
    "how a bicycle stays upright while it moves",
    "the way coral reefs grow and why they are fragile",
    "how trains were signalled safely before computers",
    "what makes a good cup of tea, from leaf to pot",
    "how glaciers carve mountains and leave lakes behind",
]

PASSAGES = [
    "The harbour town woke slowly. Fishing boats came in with the tide, gulls followed them in "
    "long loops, and the first carts rattled over the cobbles towards the market. The baker had "
    "been up since three, and the smell of fresh loaves drifted down the hill to the quay, where "
    "the harbour master was already arguing with a captain about the price of a berth.",
    "In the mountains the weather changes without warning. A clear morning can turn to fog by "
    "noon, and walkers who set out in shirtsleeves find themselves searching for the next cairn "
    "in a grey wall of cloud. Experienced guides carry a map, a compass and a spare layer, and "
    "they turn back early rather than late, because the mountain will still be there next year.",
    "A library is a machine for remembering. Each shelf holds the patient work of people who "
    "wrote things down so that others would not have to start again from nothing. Readers come "
    "and go, borrowing a week of someone else's thinking, and the catalogue keeps track of it "
    "all with a quiet order that has changed very little in a hundred years.",
    "The old railway line was closed decades ago, but the embankment remains, and in spring it "
    "fills with wild flowers. Children cycle along the cinder path where goods trains once "
    "carried coal to the coast, and the brick bridges, too solid to demolish, now frame views "
    "of fields and distant church towers that the engine drivers would have known well.",
    "Cooking rice well is a small art. Rinse the grains until the water runs almost clear, "
    "measure the water by the knuckle or by the cup, bring it to the boil and then lower the "
    "heat and leave the lid alone. Ten minutes of rest after the heat is off matters as much as "
    "the cooking, because the steam finishes the work evenly through the pot.",
    "Astronomers in the seventeenth century ground their own lenses, and a good telescope was "
    "the product of patience as much as skill. They recorded the moons of Jupiter night after "
    "night, noticing that the little points of light vanished and reappeared on a schedule, and "
    "from those timings came one of the first estimates of the speed of light.",
    "A workshop tells the story of its owner. The tools hang in outline on the wall, each in its "
    "place, and the bench carries the marks of years of sawing, planing and gluing. Offcuts are "
    "kept in a box under the window because a small piece of good oak is always useful, and the "
    "sawdust in the corner smells of cedar and pine and linseed oil.",
    "Markets in the old quarter open before dawn. Traders lay out tomatoes, peppers, herbs and "
    "cheeses in careful rows, and regular customers know which stall has the best olives and "
    "which one sells yesterday's bread at half price. By ten the crowd is thick, by two the "
    "stalls are packed away, and the square is swept clean for the evening cafes.",
]


def make_nonce(rng: random.Random) -> str:
    """A short unique tag put first in every prompt so prefix caching cannot reuse a request."""
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12))


SPEED_TOPIC = TOPICS[0]  # every speed prompt explains the same topic, so all have one token length
SPEED_TAG_DIGITS = 12


def speed_tag(rng: random.Random) -> str:
    """A unique tag of SPEED_TAG_DIGITS single digits separated by spaces ("4 0 7 …").

    One digit between spaces is one fixed-size unit in common tokenizers (digits are split or
    kept as " d" tokens alike), so every tag has the same token length while its content differs.
    """
    return " ".join(rng.choice("0123456789") for _ in range(SPEED_TAG_DIGITS))


def speed_prompt(rng: random.Random) -> str:
    """A real-text instruction of one fixed token length: the same instruction every time,
    preceded by a unique tag so prefix caching cannot reuse an earlier request."""
    return (f"Request {speed_tag(rng)}. Write a long, detailed and well organised explanation of "
            f"{SPEED_TOPIC}. Use full paragraphs of plain prose and keep going until you have covered "
            f"the subject thoroughly.")


def context_prompt(chars: int, rng: random.Random) -> str:
    """About ``chars`` characters of real prose (rotating passages), then a short question."""
    head = f"Document {make_nonce(rng)}. Read the following notes and then answer the question.\n\n"
    parts = [head]
    total = len(head)
    k = rng.randrange(len(PASSAGES))
    sec = 1
    while total < chars:
        p = f"Section {sec}. {PASSAGES[k % len(PASSAGES)]}\n\n"
        parts.append(p)
        total += len(p)
        k += 1
        sec += 1
    parts.append("Question: in one sentence, what is the first section about?")
    return "".join(parts)


#: What a streamed request asks of the server beyond the OpenAI API. The first request decides
#: (``Session.generate``): an HTTP 400 or 422 to every request steps down one level.
COMPAT_FULL = 0  # include_usage + continuous_usage_stats; min_tokens + ignore_eos when forced
COMPAT_USAGE = 1  # include_usage only, no extensions
COMPAT_PLAIN = 2  # no stream_options at all


def chat_body(model: str, messages: list[ChatMessage], max_tokens: int, forced: bool,
              compat: int, timings_per_token: bool = False) -> bytes:
    """A streamed chat completion request at a compatibility level (``COMPAT_*``); llama.cpp's
    ``timings_per_token`` is asked for at ``COMPAT_FULL`` when ``timings_per_token``."""
    body: ChatRequest = {"model": model, "messages": messages, "stream": True,
                         "max_tokens": max_tokens}
    if compat == COMPAT_FULL:
        body["max_completion_tokens"] = max_tokens
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if forced:
            body["min_tokens"] = max_tokens
            body["ignore_eos"] = True
        if timings_per_token:
            body["timings_per_token"] = True
    elif compat == COMPAT_USAGE:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, ensure_ascii=False).encode("utf-8")



def _prose(chars: int, rng: random.Random) -> str:
    """About ``chars`` characters of real prose from the passages, starting at a random one."""
    parts: list[str] = []
    total = 0
    k = rng.randrange(len(PASSAGES))
    while total < chars:
        parts.append(PASSAGES[k % len(PASSAGES)])
        total += len(parts[-1]) + 1
        k += 1
    return " ".join(parts)[:max(chars, 1)]


def suffix_prompt(chars: int, rng: random.Random) -> str:
    """A prefix-phase user message: a unique tag first (no two requests share it), then prose."""
    head = f"Request {make_nonce(rng)}. About the document above: "
    return head + _prose(max(chars - len(head) - 40, 1), rng) + " Answer in one sentence."


def turn_prompt(turn: int, chars: int, rng: random.Random) -> str:
    """A multi-turn user message: the first starts with a unique tag (each conversation its own
    history, none shared with another run), every turn brings about ``chars`` characters of prose."""
    head = (f"Conversation {make_nonce(rng)}. " if turn == 1 else "") + f"Turn {turn}. Here are more notes: "
    return head + _prose(max(chars - len(head) - 40, 1), rng) + " What stands out so far?"

