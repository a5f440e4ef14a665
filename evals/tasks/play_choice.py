"""Multiple-choice lm-eval tasks over held-out plays: after N bytes of a play, which of K
continuations comes next. Two kinds of item, one scoring:

- ``speaker`` (task ``shakespeare_speaker_choice``, the default): the name in the next speaker tag.
  The choices are the true name and K-1 other names, each followed by the period that closes a tag
  (``"Ham."``).
- ``word`` (task ``shakespeare_word_choice``): the next word of a speech. The choices are the true
  word and K-1 other words of the same play with as many letters, each followed by the character
  that follows the true word (``"lord,"``, ``"heart,"``, ...).

Why. ``next_speaker.py`` asks a model to *generate* the next speaker's name, which the trained
7M-parameter byte models of this project almost never do, even with an fp32 state, so it cannot
show a precision effect. Ranking K given continuations by log-likelihood is easier, and a task a
model does clearly above chance can show whether a lossy state changes its answers. Measured on CPU
with an fp32 state (``scripts/play_choice_fp32.py``, reports/play-choice-cpu/, README "The
multiple-choice play task"): both models pick the true speaker against names from the other plays
clearly above chance, and the true word against other words less so; against the other speakers of
the same play, or of the last speeches, they are at chance. In no design does the whole context beat
its last 256 bytes by more than a few items: these models draw on little further back, so for them
no item tests long-range memory (a model that does is tested by the same items: the true speaker's
previous tag can be further back, ``gap_bytes``). What grows with a bucket is then the stream
the state has run through: with ``prompt=decode`` (below) a context of N bytes is N decode steps of
the policy before the choices are read, so the buckets ask whether a lossy state's answers drift as
that stream grows.

Items. Both kinds reuse ``next_speaker.py``: ``speaker_turns`` finds the speaker tags (modern and
First Folio layouts) and ``bucket_edges`` / ``bucket_label`` the context-length buckets. An item's
context is the play from its first byte up to the name or word. A speaker item's distractors
(``distractors``): ``"other-plays"`` (the default), names of the speakers of the other plays given,
written in this play's tag style (upper case or capitalised), never a name that may be one of this
play's characters or that occurs anywhere in its text, with the true speaker's name always in the
context already (a first speech is no item), so the question is "which of these belongs to this
play"; ``"cast"``, other speakers of the same play; ``"recent"``, other speakers of the last
``window`` speeches (those on stage). Names that may be the same character (one a prefix of the
other, as "Oth" / "Othe" in the Folio) are never drawn against each other. A word item is a run of
lower-case letters (apostrophes allowed, at least ``min_letters`` letters) that follows a space
(speaker tags start with a capital, so these are words of speeches and of a few stage directions);
its distractors are drawn from the play's other words of the same length, weighted by how often they
occur, so they are common words as plausible a priori as the true one, and all choices have the same
number of bytes. Per play and bucket ``per_bucket`` items are drawn with a fixed seed, and so are the
distractors and the position of the true continuation among the choices. The character appended to
every choice (a tag's period, or the one after the true word) keeps any choice from being a prefix
of another, so a short name or word does not win by being short.

Scoring (the YAML ``write_task`` writes). ``output_type: multiple_choice``, metric ``acc``: the
choice with the highest summed log-likelihood. lm-eval moves a context's trailing whitespace into
every continuation (``TemplateLM._encode_pair``: ``n_spaces = len(context) - len(context.rstrip())``,
then ``continuation = context[-n_spaces:] + continuation`` and ``context = context[:-n_spaces]``),
so each choice is scored as "that whitespace, then the choice" after the context without it. With a
byte-level tokenizer this is log p(ws | context') + log p(choice | context' + ws), and context' + ws
is the context as written: the first term is one number shared by every choice, so the argmax, hence
``acc``, is that of the choices alone. (``acc_norm`` divides by a choice's length and would be
changed by the shared prefix; it is not used.) Through ``replayssm`` with ``scoring=decode`` the
context is written into the state and each choice's bytes (the whitespace first) are decode steps of
the policy, branched from that one state: with ``prompt=prefill`` the context is a prefill (a lossy
policy touches only its checkpoint write and the few choice bytes); with ``prompt=decode`` every
context byte is a decode step too (``evals/lmeval_model.py``; docs/design.md §9).

    python -m precision_lab.evals.tasks.play_choice --data gutenberg --out runs/play-choice
    lm_eval --model replayssm --include_path runs/play-choice --tasks shakespeare_speaker_choice \\
        --model_args pretrained=gutenberg-qwen3.5,policy=shared:nvfp4-sr,scoring=decode,prompt=decode,max_length=200000

Each jsonl row: ``id``, ``play``, ``kind``, ``context``, ``choices``, ``gold`` (index of the true
continuation), ``answer`` (the true name or word), ``context_bytes``, ``bucket`` (e.g.
``"1024-4095"``), ``gap_bytes`` (speaker items: bytes since the speaker's previous tag, null for a
first speech; word items: bytes since the word last occurred, null if it had not), ``design`` (the
distractor design for speakers, ``"same-length"`` for words).
"""
from __future__ import annotations

import random
import re
from pathlib import Path

from .next_speaker import (
    DEFAULT_BUCKETS,
    bucket_edges,
    bucket_label,
    items_cli,
    plays_from_source,
    report_items,
    speaker_turns,
    task_yaml_head,
    write_items,
)

KINDS = ("speaker", "word")
TASK_NAMES = {"word": "shakespeare_word_choice", "speaker": "shakespeare_speaker_choice"}
DISTRACTORS = ("other-plays", "cast", "recent")
DEFAULT_K = 4

# a lower-case word after a space, and the character after it
_WORD = re.compile(r"(?<= )(?P<word>[a-z](?:[a-z']*[a-z])?)(?=(?P<after>[^A-Za-z']))")


def same_character(a: str, b: str) -> bool:
    """Two tags that may name one character: equal, or one a prefix of the other, ignoring case
    ("Oth" / "Othello", "KING" / "King")."""
    a, b = a.lower(), b.lower()
    return a.startswith(b) or b.startswith(a)


def _styled(name: str, upper: bool) -> str:
    return name.upper() if upper else " ".join(w[:1].upper() + w[1:].lower() for w in name.split(" "))


def foreign_names(title: str, text: str, plays, *, min_turns: int = 3) -> list[str]:
    """Speaker names of the other plays in ``plays`` written in this play's tag style (upper case
    or capitalised, as most of its tags are), leaving out every name that may be a character of
    this play (``same_character`` with one of its tags) or occurs anywhere in its text; sorted."""
    cast = {t.name for t in speaker_turns(text, min_turns=1)}
    names = [t.name for t in speaker_turns(text, min_turns=min_turns)]
    upper = sum(n.isupper() for n in names) * 2 > len(names)
    low = text.lower()
    out = set()
    for other, other_text in plays:
        if other == title:
            continue
        for name in {t.name for t in speaker_turns(other_text, min_turns=min_turns)}:
            cand = _styled(name, upper)
            if cand.lower() in low or any(same_character(cand, c) for c in cast):
                continue
            out.add(cand)
    return sorted(out)


def word_candidates(text: str, *, min_letters: int = 3) -> list[tuple[int, str, str]]:
    """(character offset, word, the character after it) of every word-item position: a lower-case
    word of at least ``min_letters`` letters after a space. Speaker tags never match (they start
    with a capital), so these are words of speeches (and of a few stage directions)."""
    return [(m.start(), m.group("word"), m.group("after")) for m in _WORD.finditer(text)
            if sum(c.isalpha() for c in m.group("word")) >= min_letters]


def _word_pools(cands) -> dict[int, list[str]]:
    """Word occurrences by length (a word once per occurrence: drawing from it weights by frequency)."""
    pools: dict[int, list[str]] = {}
    for _, w, _ in cands:
        pools.setdefault(len(w), []).append(w)
    return pools


def _draw_words(rng: random.Random, pool: list[str], word: str, n: int) -> list[str] | None:
    """``n`` distinct words from ``pool`` (frequency-weighted), none equal to ``word``; None when the
    pool has too few."""
    distinct = {w for w in pool if w != word}
    if len(distinct) < n:
        return None
    out: list[str] = []
    while len(out) < n:
        w = pool[rng.randrange(len(pool))]
        if w != word and w not in out:
            out.append(w)
    return out


def make_items(plays, *, kind: str = "speaker", k: int = DEFAULT_K, distractors: str = "other-plays",
               buckets=DEFAULT_BUCKETS, per_bucket: int = 4, seed: int = 0, max_context: int | None = None,
               min_turns: int = 3, min_letters: int = 3, window: int = 40) -> list[dict]:
    """Items from ``plays`` = [(title, text), ...] (see the module docstring).

    kind:        "speaker" | "word"
    k:           choices per item (the true continuation and k-1 distractors)
    distractors: speaker items: "other-plays" | "cast" | "recent"
    buckets:     ascending context-length edges in bytes (the last bucket is open-ended)
    per_bucket:  items drawn per play and bucket (fewer when the play has fewer positions there)
    max_context: positions beyond this many bytes of play are not used (None: no limit)
    min_turns:   a speaker counts when it opens at least this many speeches (``speaker_turns``)
    min_letters: shortest word of a word item
    window:      speeches that count as recent for ``distractors="recent"``
    Raises ValueError for a bad setting or when no play yields a single item.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown item kind {kind!r}; expected one of {', '.join(KINDS)}")
    if distractors not in DISTRACTORS:
        raise ValueError(f"unknown distractors {distractors!r}; expected one of {', '.join(DISTRACTORS)}")
    if k < 2:
        raise ValueError(f"k must be at least 2 (the true continuation and a distractor), got {k}")
    plays = list(plays)
    items: list[dict] = []
    for title, text in plays:
        rng = random.Random(f"{seed}/{kind}/{title}")
        if kind == "word":
            found = _word_items(text, k=k, min_letters=min_letters, rng=rng)
        else:
            found = _speaker_items(title, text, plays, k=k, distractors=distractors, min_turns=min_turns,
                                   window=window, rng=rng)
        if not found:
            continue
        # byte offset of every character offset used, in one pass
        offs = sorted({f[0] for f in found})
        nbytes, pos, acc = {}, 0, 0
        for o in offs:
            acc += len(text[pos:o].encode("utf-8"))
            pos = o
            nbytes[o] = acc
        for lo, hi in bucket_edges(buckets):
            here = [f for f in found if lo <= nbytes[f[0]] < hi
                    and (max_context is None or nbytes[f[0]] <= max_context)]
            for off, answer, others, suffix, gap, design in sorted(rng.sample(here, min(per_bucket, len(here))),
                                                                   key=lambda f: f[0]):
                names = [answer] + others(rng)
                order = list(range(k))
                rng.shuffle(order)
                items.append({"id": f"{title}@{off}", "play": title, "kind": kind, "context": text[:off],
                              "choices": [names[j] + suffix for j in order], "gold": order.index(0),
                              "answer": answer, "context_bytes": nbytes[off], "bucket": bucket_label(lo, hi),
                              "gap_bytes": gap if gap is None else nbytes[off] - gap, "design": design})
    if not items:
        raise ValueError(f"no {kind} items in the plays given (speaker tags such as '\\n\\nHam.\\n' or '\\n  Ham. ...', "
                         "speeches with lower-case words); are these play texts"
                         + (", and more than one for distractors='other-plays'?" if kind == "speaker" else "?"))
    return items


def _word_items(text: str, *, k: int, min_letters: int, rng: random.Random) -> list[tuple]:
    """(char offset, word, draw(rng) -> distractors, suffix, byte offset of its last occurrence or
    None, design) per eligible position; distractors are drawn lazily for the sampled ones only."""
    cands = word_candidates(text, min_letters=min_letters)
    pools = _word_pools(cands)
    distinct = {n: set(p) for n, p in pools.items()}
    last: dict[str, int] = {}
    out = []
    prefix_bytes = 0
    prev = 0
    for off, w, after in cands:
        prefix_bytes += len(text[prev:off].encode("utf-8"))
        prev = off
        seen = last.get(w)
        last[w] = prefix_bytes
        pool = pools[len(w)]
        if len(distinct[len(w)]) - 1 < k - 1:
            continue

        def draw(r, pool=pool, w=w):
            return _draw_words(r, pool, w, k - 1)

        out.append((off, w, draw, after, seen, "same-length"))
    return out


def _speaker_items(title: str, text: str, plays, *, k: int, distractors: str, min_turns: int, window: int,
                   rng: random.Random) -> list[tuple]:
    turns = speaker_turns(text, min_turns=min_turns)
    if not turns:
        return []
    cast = sorted({t.name for t in turns})
    foreign = foreign_names(title, text, plays, min_turns=min_turns) if distractors == "other-plays" else []
    last: dict[str, int] = {}
    out = []
    prefix_bytes, prev = 0, 0
    for i, t in enumerate(turns):
        prefix_bytes += len(text[prev:t.offset].encode("utf-8"))
        prev = t.offset
        seen = last.get(t.name)
        last[t.name] = prefix_bytes
        if distractors == "other-plays":
            if seen is None:
                continue                       # the true name must occur in the context
            pool = foreign
        elif distractors == "cast":
            pool = [n for n in cast if not same_character(n, t.name)]
        else:
            pool = list(dict.fromkeys(u.name for u in reversed(turns[max(0, i - window):i])
                                      if not same_character(u.name, t.name)))
        if len(pool) < k - 1:
            continue

        def draw(r, pool=pool):
            return r.sample(pool, k - 1)

        out.append((t.offset, t.name, draw, ".", seen, distractors))
    return out


def task_yaml(jsonl_path: str | Path, task: str) -> str:
    """The lm-eval task config for rows written by ``write_task``. ``doc_to_text``, ``doc_to_choice``
    and ``doc_to_target`` name dataset fields, which lm-eval reads as they are (no template)."""
    return "\n".join([
        *task_yaml_head(jsonl_path, task, "multiple_choice"),
        "doc_to_text: context",
        "doc_to_choice: choices",
        "doc_to_target: gold",
        "target_delimiter: \"\"",
        "metric_list:",
        "  - metric: acc",
        "    aggregation: mean",
        "    higher_is_better: true",
        "metadata:",
        "  version: 1",
        "",
    ])


def write_task(out_dir: str | Path, items: list[dict], task: str | None = None) -> Path:
    """Write ``<task>.jsonl`` and ``<task>.yaml`` into ``out_dir`` (pass it to lm-eval as
    ``--include_path``); ``task`` defaults to the items' kind's name. Returns the YAML's path."""
    kinds = {it["kind"] for it in items}
    if task is None:
        if len(kinds) != 1:
            raise ValueError(f"items of several kinds {sorted(kinds)}: name the task")
        task = TASK_NAMES[kinds.pop()]
    return write_items(out_dir, items, task, lambda jsonl: task_yaml(jsonl, task))


def main(argv=None) -> int:
    ap = items_cli(__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=KINDS, default="speaker")
    ap.add_argument("--k", type=int, default=DEFAULT_K, help=f"choices per item (default {DEFAULT_K})")
    ap.add_argument("--distractors", choices=DISTRACTORS, default="other-plays", help="speaker items only")
    args = ap.parse_args(argv)
    items = make_items(plays_from_source(args.data, limit=args.plays), kind=args.kind, k=args.k,
                       distractors=args.distractors, buckets=args.buckets, per_bucket=args.per_bucket,
                       seed=args.seed, max_context=args.max_context)
    return report_items(items, write_task(args.out, items))


if __name__ == "__main__":
    raise SystemExit(main())
