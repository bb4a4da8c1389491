"""A cheap local entity recogniser: which entities a text names. Pure functions, no database.

It runs on every stored memory (memory.graph.link_mentions, in the worker) and on every search
query (memory.retrieval.search), so it must be deterministic, cheap (tens of microseconds for a
chat turn) and never fetch anything: no model, only regular expressions and word lists. It finds

- proper-noun phrases: runs of capitalised words ("New York", "Bank of America"), less the
  capitalised common words that start a sentence ("Yesterday", "The", "Thanks") and the calendar
  words every dated text carries (months, weekdays);
- acronyms ("NASA", "LGBTQ");
- quoted titles ("Charlotte's Web" in double or curly quotes);
- every `known` entity name (the scope's entities, by normalised name) that occurs in the text
  as whole words, whatever the case: so "python", once an entity, is found in lower case too.

Self-references are the caller's to map (self_entity, mentions_self): the entity a user's "I"
and "my" stand for is named by the scope's user_id (the convention extraction also follows).
What it does not do: resolve pronouns other than the first person, tell a person from a place
reliably (the type is a guess from a few suffixes, often ""), or find lower-case names it has not
been told about.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping

MAX_TEXT = 20_000  # characters looked at; the rest of a longer text is ignored
MAX_ENTITIES = 32  # per text
MAX_RUN = 6  # words in one proper-noun phrase
MAX_KNOWN_WORDS = 6  # words in a known name that can be matched
MAX_NAME = 200  # characters of a name
MAX_QUERY_WORDS = 12  # query words matched by meaning (query_words)

_SPACES = re.compile(r"\s+")
# A word: letters (any script), then letters, digits, apostrophes, hyphens, ampersands.
_WORD = re.compile(r"[^\W\d_][\w'\u2019&-]*")
# Between two words of one phrase only spaces may stand (a comma or a full stop ends it).
_JOIN = re.compile(r"[ \t]+")
# What ends a sentence (or starts a new utterance, like "[date] Name: text").
_SENTENCE_BREAK = re.compile(r"[.!?:;\[\](){}\"“”\n]")
_TITLE = re.compile(r"[\"“]([^\"“”\n]{2,80}?)[\"”]")
_ACRONYM = re.compile(r"[A-Z][A-Z0-9&+]*[A-Z0-9+]")
# Words for matching known names: a run of word characters and the symbols names keep.
_KNOWN_TOKEN = re.compile(r"\w(?:[\w+#&.'\u2019-]*[\w+#])?")
_SELF = re.compile(
    r"\b(?:i|me|my|mine|myself|i'm|i\u2019m|i've|i\u2019ve|i'd|i\u2019d|i'll|i\u2019ll"
    # The first person singular of German, Spanish, French, Russian, Arabic and Hindi...
    r"|ich|mein|meine|mich|mir|yo|je|j'|moi|я|меня|мне|мой|моя|моё|мои|أنا)\b"
    # ... Hindi's (its vowel signs are no word characters: no \b after them), and Chinese,
    # Japanese and Korean ones, which no space delimits.
    r"|(?<!\w)(?:मैं|मेरा|मेरी|मेरे|मुझे)|我|私|僕|わたし|저는|제가|나는|내가|제\s",
    re.I,
)


# Capitalised words that are not names: sentence starters, pronouns, greetings, calendar words.
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOP_WORDS = _words(
    """
    a about above after again against all almost also although always am among an and another
    any anyway are aren't around as at be because been before being below besides between both
    but by can cannot could couldn't did didn't do does doesn't doing don't done down during
    each either else even ever every few for from further get gets getting got had hadn't has
    hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his
    how how's however i i'd i'll i'm i've if in into is isn't it it's its itself just let let's
    like many may maybe me might mine more most much must my myself neither never no nor not now
    of off often on once one only or other others otherwise our ours ourselves out over own
    perhaps please quite rather really same she she'd she'll she's should shouldn't since so
    some such than that that's the their theirs them themselves then there there's these they
    they'd they'll they're they've this those though through thus to too under until up upon us
    very was wasn't we we'd we'll we're we've were weren't what what's whatever when when's
    where where's whether which while who who's whom whose why why's will with within without
    won't would wouldn't yet you you'd you'll you're you've your yours yourself yourselves
    absolutely actually agreed alright amazing anyway anyways awesome aw aww bye cheers congrats
    congratulations cool dear definitely exactly fantastic fine glad good goodbye great haha hello
    hey hi hmm honestly indeed lol nice oh ok okay oops sorry sure thank thanks totally true
    um well wow yay yeah yes yep yup
    also anyway back besides finally first last lately later next recently second soon still
    today tomorrow tonight yesterday
    user assistant mr mrs ms dr prof sir
    went go going got made make took take saw see said say told tell felt feel thought think
    tried try started start love loved hope guess wish need want mean know knew sounds seems
    looks looking keep kept check remember imagine
    january february march april june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday
    mon tue tues wed thu thurs fri sat sun jan feb mar apr jun jul aug sep sept oct nov dec
    am pm
    """
)
# Lower-case words allowed inside a proper-noun phrase: "Bank of America", "Leonardo da Vinci".
_CONNECTORS = frozenset({"of", "de", "da", "del", "della", "di", "du", "la", "le", "van", "von"})
_ORGANIZATION = _words(
    """inc corp corporation company co ltd llc gmbh university college school academy institute
    bank club church foundation association society team group labs agency"""
)
_LOCATION = _words(
    """city town street st avenue road park lake river mountain mount beach island islands
    county state country valley bay canyon forest"""
)
_POSSESSIVE = re.compile(r"['\u2019]s$|['\u2019]$", re.I)


def normalise(name: str) -> str:
    """The identity of a name: what memory.graph.normalise_name computes (kept equal by a test)."""
    return _SPACES.sub(" ", name).strip().lower()


def self_entity(scope: Mapping[str, str | None]) -> str | None:
    """The entity a scope's first person ("I", "me", "my") stands for: its user, else its agent."""
    return scope.get("user_id") or scope.get("agent_id") or None


def mentions_self(text: str) -> bool:
    """Whether the text speaks in the first person singular."""
    return _SELF.search(text[:MAX_TEXT]) is not None


def known_names(names: Iterable[str]) -> dict[str, str]:
    """`names` prepared for recognise(): normalised name -> the name as given. Pass the result
    when recognising many texts against the same names (the worker does)."""
    prepared: dict[str, str] = {}
    for name in names:
        key = normalise(name)
        if key and key.count(" ") < MAX_KNOWN_WORDS:
            prepared.setdefault(key, name)
    return prepared


# How a text says what its first person is called: "My name is Dana", "call me Dana", "I go by
# Dana", "I'm called Dana", the third-person forms extraction writes ("User's name is Dana",
# "User goes by Dana", "Name is Dana"), and a note's label at its start ("Name: Dana Ruiz",
# "Customer name: Dana Ruiz", "Full name Dana Ruiz"). The name is the run of capitalised words
# that follows.
_OWN_NAME = re.compile(
    r"(?:\b(?:my|(?:the )?user['\u2019]s)\s+(?:first\s+|full\s+|given\s+)?name\s*(?:is|['\u2019]s)"
    r"|^\s*(?:(?:customer|client|member|contact|full|legal|preferred)\s+)?name(?:\s*:|\s+is)"
    r"|^\s*full\s+name|\b(?:call|calls)\s+me|\b(?:i|user)\s+(?:go|goes)\s+by"
    r"|\b(?:i['\u2019]m|i\s+am|user\s+is)\s+(?:called|named))\s+",
    re.IGNORECASE,
)
_NAME_RUN = r"[^\W\d_][\w'\u2019-]*(?:[ \t]+[^\W\d_][\w'\u2019-]*){0,2}"
_NAME_WORDS = re.compile(_NAME_RUN)
# The name before the form: "Ingrid Halvorsen is my name."
_NAME_FIRST = re.compile(
    r"(?P<name>" + _NAME_RUN + r")\s+is\s+my\s+(?:(?:first|full|given)\s+)?name\b",
    re.IGNORECASE,
)
# An introduction: "I'm Dana." "Hi, I am Mary Jane, ..." "I'm Theo and ...": capitalised words
# after "I'm" that end the clause. (A capitalised word that is not a name, "I'm British.", is
# read as one too: the price of reading the most common way people give their name.)
_INTRODUCTION = re.compile(
    r"\b(?:i['\u2019]m|i\s+am)\s+(?P<name>" + _NAME_RUN + "?)"
    r"(?=\s*(?:[,.;!?]|$)|\s+(?:and|but|though|from|here)\b)",
    re.IGNORECASE,
)


# The same forms in other languages (memory.text.language), the name after them: German, Spanish,
# French, Italian, Portuguese, Dutch, Russian, Ukrainian, Arabic, Hindi; then Chinese, Japanese
# and Korean, whose names are runs of characters (CJK_RUN) with no space or case to end them.
_OWN_NAME_WORLD = re.compile(
    r"(?:\b(?:ich\s+hei(?:ß|ss)e|mein\s+name\s+ist|me\s+llamo|mi\s+nombre\s+es"
    r"|je\s+m['\u2019]appelle|mon\s+nom\s+est|mi\s+chiamo|il\s+mio\s+nome\s+è"
    r"|meu\s+nome\s+é|me\s+chamo|ik\s+heet|mijn\s+naam\s+is"
    r"|меня\s+зовут|мо[её]\s+имя|мене\s+звати|मेरा\s+नाम)\s+|اسمي\s+"
    r"|我叫|我的名字(?:是|叫)|我名叫|(?:私の|わたしの)?名前は|[제내]\s*이름은\s*)",
    re.IGNORECASE,
)
# Chinese, Japanese (kanji and katakana) and Korean characters of a name.
CJK_NAME = "\u3400-\u4dbf\u4e00-\u9fff\u30a0-\u30ff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{CJK_NAME}]{{2,8}}")
# A Japanese introduction at the start: "佐藤美咲です。", "中村と申します".
_CJK_FIRST = re.compile(f"^\\s*(?P<name>[{CJK_NAME}]{{2,4}})(?:です|と申します|といいます)")
# What ends a Korean name in "제 이름은 김지우예요": the copula.
_KOREAN_ENDING = re.compile("(?:이에요|예요|입니다|이야|이고|야|고|요)$")
# Words that end a name written without capitals (Hindi's copula), and punctuation.
_CASELESS_ENDS = frozenset({"है", "हूँ", "हूं", "हैं", "था", "थी"})
_NAME_END = ",.;:!?\u060c\u061b\u061f\u0964\u0965"


def name_stem(name: str) -> str:
    """What every inflected form of a (normalised) name starts with: its first word less two
    letters, at least four ("дмитр" of "дмитрий", "katr" of "katrin")."""
    first = name.split(maxsplit=1)[0] if name.split() else name
    return first[: max(4, len(first) - 2)]


def inflects(word: str, name: str) -> bool:
    """Whether `word` (a query's normalised name) is `name` (a said one) inflected, word for
    word: the same stem (each word but its last two letters, at least four) and at most two
    letters more or fewer: "дмитрия" and "галины петровны" for "дмитрий", "галина петровна";
    "katrins" for "katrin". For languages that inflect names (not English: "willow" is not
    "will"); two names of one stem are read as one ("maria" and "mario")."""
    words, names = word.split(), name.split()
    if len(words) != len(names):
        return False
    for w, n in zip(words, names, strict=True):
        stem = max(4, len(n) - 2)
        unlike = len(n) < 4 or w[:stem] != n[:stem] or abs(len(w) - len(n)) > 2
        if unlike and w != n:
            return False
    return True


def cjk_names(run: str) -> list[str]:
    """The names a run of CJK characters after "我叫", "名前は"... may be: its first two to four
    characters (a family name and given name, with no space to tell where the name ends:
    "我叫林晓雯在成都工作" gives 林晓, 林晓雯 and 林晓雯在) and the given name alone, its last
    two of three or four (晓雯, 大輔)."""
    run = _KOREAN_ENDING.sub("", run)
    names = [run[:n] for n in range(min(4, len(run)), 1, -1)]
    names += [run[-2:]] if len(run) in (3, 4) else []
    return list(dict.fromkeys(names))


def _caseless_name(text: str) -> list[str]:
    """The name that starts `text`, in a script without capitals (its vowel signs are not word
    characters to a regular expression): up to three words, to punctuation or a copula."""
    words = []
    for word in text.split()[:3]:
        bare = word.rstrip(_NAME_END)
        if not bare or bare in _CASELESS_ENDS:
            break
        words.append(bare)
        if bare != word:
            break
    return words


def own_names(text: str) -> list[str]:
    """Normalised names the text says its first person (or its user) goes by: "My name is Mary
    Jane Watson." gives "mary jane watson", "mary jane", "mary" and "jane watson" (a first name
    alone names the same person, and so do the last two words of three: "Tan Mei Ling" is also
    "mei ling"; a surname alone does not, a relative shares it). A name is a run of up to three
    capitalised words after one of the forms above, or before "is my name". A word that is
    usually a stop word ("Hope", "Will") is a name when it begins a run of two or more."""
    text = text[:MAX_TEXT]
    runs: list[list[str]] = []
    for match in _OWN_NAME.finditer(text):
        following = _NAME_WORDS.match(text, match.end())
        words = following.group().split() if following else []
        runs.append(list(itertools.takewhile(lambda w: w[:1].isupper(), words)))
    runs += [_trailing_name(match.group("name").split()) for match in _NAME_FIRST.finditer(text)]
    for match in _INTRODUCTION.finditer(text):
        words = match.group("name").split()
        runs.append(words if all(w[:1].isupper() for w in words) else [])
    cjk: list[str] = []
    for match in _OWN_NAME_WORLD.finditer(text):
        characters = _CJK_RUN.match(text, match.end())
        if characters is not None:
            cjk += cjk_names(characters.group())
            continue
        following = _NAME_WORDS.match(text, match.end())
        words = following.group().split() if following else []
        if words and words[0][:1].isupper():
            runs.append(list(itertools.takewhile(lambda w: w[:1].isupper(), words)))
        elif words and not words[0][:1].islower():  # a script without case (Arabic, Hindi)
            runs.append(_caseless_name(text[match.end() : match.end() + MAX_NAME]))
    introduced = _CJK_FIRST.match(text)
    if introduced is not None:
        cjk += cjk_names(introduced.group("name"))
    found = [normalise(name) for name in cjk]
    for run in runs:
        words = [_POSSESSIVE.sub("", w) for w in run]
        names = [normalise(" ".join(words[:n])) for n in range(len(words), 0, -1)]
        names += [normalise(" ".join(words[-2:]))] if len(words) == 3 else []
        found += [n for n in names if len(words) > 1 or n not in STOP_WORDS]
    return list(dict.fromkeys(found))


def _trailing_name(words: list[str]) -> list[str]:
    """The capitalised words that end `words`, less the stop words that begin them ("So Ingrid
    Halvorsen" is "Ingrid Halvorsen")."""
    start = len(words)
    while start and words[start - 1][:1].isupper():
        start -= 1
    return list(itertools.dropwhile(lambda w: normalise(w) in STOP_WORDS, words[start:]))


def recognise(text: str, known: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The entities `text` names, as (display name, type) pairs in order of first appearance.

    At most MAX_ENTITIES, each name at most MAX_NAME characters, distinct by normalised name.
    The type is a guess ("organization", "location", "work", "acronym") or "". `known` may be
    a mapping made by known_names().
    """
    text = text[:MAX_TEXT]
    found: dict[str, tuple[int, str, str]] = {}

    def add(position: int, name: str, kind: str) -> None:
        name = name.strip()[:MAX_NAME].strip()
        key = normalise(name)
        if key and key not in STOP_WORDS and (key not in found or position < found[key][0]):
            found[key] = (position, name, kind)

    titles: list[tuple[int, int]] = []
    for match in _TITLE.finditer(text):
        title = match.group(1).strip()
        if title[:1].isupper() and len(title.split()) <= 8:
            add(match.start(1), title, "work")
            titles.append(match.span(1))
    for start, words in _phrases(text):
        if not any(a <= start < b for a, b in titles):  # a title's words are not names of their own
            add(start, " ".join(words), _guess_type(words))
    for start, name in _known_in(text, known):
        add(start, name, "")
    ordered = sorted(found.values())[:MAX_ENTITIES]
    return [(name, kind) for _, name, kind in ordered]


def query_names(text: str, known_words: int = 3) -> list[str]:
    """Normalised names a search query may mean: what recognise() finds, and every run of up to
    `known_words` words that neither begins nor ends with a stop word (one capitalised after the
    first word, "Where does Hope live?", counts as a name), so the database can match the
    scope's own (possibly lower-case) entity names against them. At most 4 * MAX_ENTITIES."""
    names = [normalise(name) for name, _ in recognise(text)]
    tokens = _KNOWN_TOKEN.findall(text[:MAX_TEXT])
    words = [_POSSESSIVE.sub("", t.lower()) for t in tokens]
    # A stop word capitalised after the first word is a name: "Where does Hope live?"
    named = {i for i, t in enumerate(tokens) if i and t[:1].isupper() and not t.isupper()}

    def stop(i: int) -> bool:
        return words[i] in STOP_WORDS and i not in named

    for size in range(1, known_words + 1):
        for i in range(len(words) - size + 1):
            first = words[i]
            if stop(i) or stop(i + size - 1) or len(first) < 2 or first.isdigit():
                continue
            names.append(" ".join(words[i : i + size]))
    names += _unspaced_names(text[:MAX_TEXT])
    return list(dict.fromkeys(n[:MAX_NAME] for n in names if n))[: 4 * MAX_ENTITIES]


def _unspaced_names(text: str) -> list[str]:
    """The names a query may mean that words of letters alone do not give: in Chinese,
    Japanese and Korean, every two to four characters of a run (no space ends a name there:
    "林晓雯是干什么的" holds 林晓雯); in scripts with vowel signs (Hindi), each word and pair of
    words as spaces and punctuation delimit them."""
    names = []
    for run in _CJK_RUN.findall(text):
        names += [run[i : i + n] for n in (2, 3, 4) for i in range(len(run) - n + 1)]
    if any("\u0900" <= c <= "\u0dff" for c in text):
        words = [w.strip(_NAME_END + "\"'") for w in text.split()]
        words = [w for w in words if w]
        names += words + [" ".join(words[i : i + 2]) for i in range(len(words) - 1)]
    return [normalise(name) for name in names]


def query_words(text: str) -> list[str]:
    """The words of a search query that search matches against the scope's entity names by
    meaning (memory.retrieval.search): "cities" finds "rome". Not the words of the names the
    query itself names (those are matched by name), nor stop words. At most MAX_QUERY_WORDS,
    in order of appearance. (Two-word phrases as well ranked LoCoMo the same, at twice the
    embeddings.)"""
    named = {w for name, _ in recognise(text) for w in normalise(name).split()}
    words = [w for w in query_names(text, 1) if named.isdisjoint(w.split())]
    return words[:MAX_QUERY_WORDS]


def _phrases(text: str) -> Iterable[tuple[int, list[str]]]:
    """Runs of capitalised words (and acronyms). A capitalised common word starting a sentence
    is left out; so is any other single capitalised word starting a sentence ("Painting is
    fun"), unless it labels an utterance ("Melanie: ...") or is an acronym: a name there is
    found where it is mentioned mid-sentence, and from then on as a known name."""
    run: list[str] = []
    run_start = 0
    run_initial = False  # the run starts a sentence
    previous_end = -1  # no word yet: the first one starts a sentence

    def finish() -> Iterable[tuple[int, list[str]]]:
        if run_initial and len(run) == 1 and not _ACRONYM.fullmatch(run[0]):
            after = text[run_start + len(run[0]) : run_start + len(run[0]) + 3].lstrip()
            if not after.startswith(":"):
                return ()
        return _finish(run_start, run)

    for match in _WORD.finditer(text):
        gap = text[max(previous_end, 0) : match.start()]
        initial = previous_end < 0 or _SENTENCE_BREAK.search(gap) is not None
        previous_end = match.end()
        if run and (initial or _JOIN.fullmatch(gap) is None):
            yield from finish()
            run = []
        raw = match.group()
        word = _POSSESSIVE.sub("", raw)
        if word[:1].isupper() and not (initial and _common(word)):
            if not run:
                run_start, run_initial = match.start(), initial
            run.append(word)
        elif run and word in _CONNECTORS:
            run.append(word)
        elif run:
            yield from finish()
            run = []
        if run and raw != word:  # a possessive ends the phrase: "Melanie's kids" names Melanie
            yield from finish()
            run = []
    if run:
        yield from finish()


def _finish(start: int, run: list[str]) -> Iterable[tuple[int, list[str]]]:
    while run and (run[-1] in _CONNECTORS or run[-1].lower() in STOP_WORDS):
        run = run[:-1]
    while run and run[0].lower() in STOP_WORDS and not _ACRONYM.fullmatch(run[0]):
        run = run[1:]
    if not run:
        return
    for i in range(0, len(run), MAX_RUN):
        yield start, run[i : i + MAX_RUN]


def _common(word: str) -> bool:
    """A capitalised word that starts a sentence and is probably not a name."""
    lower = word.lower()
    if _ACRONYM.fullmatch(word) and len(word) > 1:
        return False
    return (
        lower in STOP_WORDS
        or lower.split("'")[0].split("\u2019")[0] in STOP_WORDS
        or (len(lower) > 4 and lower.endswith(("ing", "ly", "ed")))
    )


def _guess_type(words: list[str]) -> str:
    last = words[-1].lower()
    if len(words) == 1 and _ACRONYM.fullmatch(words[0]):
        return "acronym"
    if last in _ORGANIZATION:
        return "organization"
    if last in _LOCATION or (len(words) > 1 and words[0].lower() in _LOCATION):
        return "location"
    return ""


def _known_in(text: str, known: Iterable[str]) -> Iterable[tuple[int, str]]:
    """Known names occurring as whole words, case-insensitively: n-grams of the text's words
    looked up in a set, so the cost follows the text, not the number of known names."""
    names = known if isinstance(known, dict) else known_names(known)
    if not names:
        return
    longest = max(key.count(" ") + 1 for key in names)
    tokens = list(_KNOWN_TOKEN.finditer(text.lower()))
    for i, token in enumerate(tokens):
        for size in range(1, min(longest, len(tokens) - i) + 1):
            words = [t.group() for t in tokens[i : i + size]]
            for variant in {
                " ".join(words),
                " ".join([*words[:-1], _POSSESSIVE.sub("", words[-1])]),
            }:
                if variant in names:
                    yield token.start(), names[variant]
