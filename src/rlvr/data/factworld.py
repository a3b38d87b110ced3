"""FactWorld: a seeded world of fictional entities, its encyclopedia and questions about it.

Why: a search agent trained on real trivia can answer from memory, which hides whether it learned to search.
Every name here is built from random syllables, so no model has seen these facts: a question is answerable
only by reading the corpus. One world feeds the TriviaQA-style single-hop environment and the MuSiQue-style
multi-hop environment (records in MuSiQue's own layout, so one loader serves both real and synthetic data).

Difficulty knobs:
- ``num_entities``: corpus size (how many competing paragraphs a search has to beat);
- ``relations=`` of the question generators: e.g. ``("capital",)`` gives the easiest task, where searching
  the entity named in the question returns a paragraph that states the answer (demo-sized models);
- ``hops`` (2-4) of multi-hop questions and their number of distractor paragraphs.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from rlvr.retrieval import Document

KINDS = ("country", "city", "person", "organization")

# Share of each kind in a world of `num_entities` (the rest of the rounding goes to people).
_KIND_SHARE = {"country": 0.1, "city": 0.3, "organization": 0.2}

# Syllables for names: pronounceable, and rare enough as whole words that a fictional name is one token that
# BM25 matches only in the paragraphs that mention it.
_SYLLABLES = (
    "bar", "cor", "dra", "dun", "el", "fen", "gal", "hul", "ix", "jor", "ka", "lum", "mor", "nar", "oth",
    "pel", "quor", "rin", "sa", "tev", "ul", "vel", "wyn", "yx", "zar", "bri", "tho", "mek", "ast", "ov",
)
_COUNTRY_SUFFIXES = ("ia", "land", "stan", "ora", "mark")
_ORG_SUFFIXES = ("Institute", "Company", "Guild", "Foundation", "Works", "Society")
_OCCUPATIONS = ("painter", "engineer", "poet", "astronomer", "architect", "composer", "botanist", "cartographer")


@dataclass(frozen=True)
class Relation:
    """One kind of fact: how it is asked, nested inside a longer question, and written in a paragraph."""

    name: str
    subject: str  # kind of the entity the fact is about
    target: str | None  # kind of the entity the fact points to; None for a literal value (year, language...)
    question: str  # single-hop question, "{x}" = the subject
    phrase: str  # noun phrase naming the object, to nest in a multi-hop question; "{x}" = the subject
    sentence: str  # how the subject's paragraph states it; "{s}" subject name, "{o}" object name or value


RELATIONS: dict[str, Relation] = {
    r.name: r
    for r in (
        Relation("capital", "country", "city", "What is the capital of {x}?", "the capital of {x}",
                 "The capital of {s} is {o}."),
        Relation("leader", "country", "person", "Who leads {x}?", "the leader of {x}", "{s} is led by {o}."),
        Relation("language", "country", None, "What language is spoken in {x}?", "the language of {x}",
                 "The people of {s} speak {o}."),
        Relation("country", "city", "country", "In which country is {x}?", "the country of {x}",
                 "{s} lies in {o}."),
        Relation("river", "city", None, "Which river flows through {x}?", "the river of {x}",
                 "The {o} flows through {s}."),
        Relation("city_founded", "city", None, "In which year was {x} founded?", "the founding year of {x}",
                 "{s} was founded in {o}."),
        Relation("birthplace", "person", "city", "Where was {x} born?", "the birthplace of {x}",
                 "{s} was born in {o}."),
        Relation("birth_year", "person", None, "In which year was {x} born?", "the birth year of {x}",
                 "{s} was born in the year {o}."),
        Relation("occupation", "person", None, "What was the occupation of {x}?", "the occupation of {x}",
                 "{s} worked as a {o}."),
        Relation("employer", "person", "organization", "Which organization did {x} work for?",
                 "the employer of {x}", "{s} worked for the {o}."),
        Relation("founder", "organization", "person", "Who founded {x}?", "the founder of {x}",
                 "The {s} was founded by {o}."),
        Relation("headquarters", "organization", "city", "In which city is {x} headquartered?",
                 "the headquarters of {x}", "The {s} is headquartered in {o}."),
        Relation("org_founded", "organization", None, "In which year was {x} established?",
                 "the founding year of {x}", "The {s} was established in {o}."),
    )
}

_KIND_NOUN = {"country": "a country", "city": "a city", "person": "a person", "organization": "an organization"}


@dataclass(frozen=True)
class Entity:
    id: str
    kind: str
    name: str
    aliases: tuple[str, ...]  # every accepted way to write the name, the name first
    facts: dict[str, str]  # relation name -> entity id (entity-valued relations) or literal value


@dataclass(frozen=True)
class FactWorld:
    seed: int
    entities: tuple[Entity, ...]

    # ---- generation ----------------------------------------------------------------------------------

    @classmethod
    def generate(cls, seed: int = 0, num_entities: int = 100) -> FactWorld:
        """A reproducible world: the same seed and size always give the same entities, facts and corpus."""
        if num_entities < 10:
            raise ValueError(
                f"FactWorld.generate(num_entities={num_entities}): need at least 10 entities so that every kind "
                "(country, city, person, organization) exists; pass num_entities >= 10"
            )
        rng = random.Random(seed)
        counts = {kind: max(1, round(num_entities * share)) for kind, share in _KIND_SHARE.items()}
        counts["person"] = num_entities - sum(counts.values())
        # Every country needs a city to be its capital.
        counts["city"] = max(counts["city"], counts["country"])
        counts["person"] = num_entities - counts["country"] - counts["city"] - counts["organization"]

        stems = _unique_stems(rng, count=num_entities * 2 + counts["city"] + counts["country"])
        ids = {kind: [f"{kind}-{i:04d}" for i in range(counts[kind])] for kind in KINDS}
        names: dict[str, tuple[str, ...]] = {}
        for eid in ids["country"]:
            names[eid] = (next(stems) + rng.choice(_COUNTRY_SUFFIXES),)
        for eid in ids["city"]:
            names[eid] = (next(stems),)
        for eid in ids["person"]:
            given, family = next(stems), next(stems)
            names[eid] = (f"{given} {family}", family)
        for eid in ids["organization"]:
            stem = next(stems)
            names[eid] = (f"{stem} {rng.choice(_ORG_SUFFIXES)}", stem)

        facts: dict[str, dict[str, str]] = {eid: {} for kind in KINDS for eid in ids[kind]}
        for i, city in enumerate(ids["city"]):
            # Round-robin first so that every country gets at least one city, then at random.
            country = ids["country"][i] if i < len(ids["country"]) else rng.choice(ids["country"])
            river = next(stems)
            facts[city].update(country=country, river=f"{river} River", city_founded=str(rng.randint(800, 1899)))
        for country in ids["country"]:
            own_cities = [c for c in ids["city"] if facts[c]["country"] == country]
            facts[country].update(
                capital=rng.choice(own_cities),
                leader=rng.choice(ids["person"]),
                language=next(stems) + "ish",
            )
        for person in ids["person"]:
            facts[person].update(
                birthplace=rng.choice(ids["city"]),
                birth_year=str(rng.randint(1800, 1989)),
                occupation=rng.choice(_OCCUPATIONS),
                employer=rng.choice(ids["organization"]),
            )
        for org in ids["organization"]:
            facts[org].update(
                founder=rng.choice(ids["person"]),
                headquarters=rng.choice(ids["city"]),
                org_founded=str(rng.randint(1850, 1999)),
            )
        entities = tuple(
            Entity(id=eid, kind=kind, name=names[eid][0], aliases=names[eid], facts=facts[eid])
            for kind in KINDS
            for eid in ids[kind]
        )
        return cls(seed=seed, entities=entities)

    # ---- lookups -------------------------------------------------------------------------------------

    @cached_property
    def _by_id(self) -> dict[str, Entity]:
        return {e.id: e for e in self.entities}

    def entity(self, entity_id: str) -> Entity:
        try:
            return self._by_id[entity_id]
        except KeyError:
            raise KeyError(f"FactWorld(seed={self.seed}) has no entity {entity_id!r}") from None

    def _object(self, subject: Entity, relation: Relation) -> tuple[str, tuple[str, ...], Entity | None]:
        """(answer, accepted aliases, target entity or None) of one fact."""
        value = subject.facts[relation.name]
        if relation.target is None:
            # "Ostel River" may be answered "Ostel"; other literals (years, languages) have one spelling.
            aliases = (value, value.removesuffix(" River")) if value.endswith(" River") else (value,)
            return value, aliases, None
        target = self.entity(value)
        return target.name, target.aliases, target

    # ---- corpus --------------------------------------------------------------------------------------

    def documents(self) -> list[Document]:
        """One encyclopedia-style paragraph per entity, naming the entity in every sentence (so a search
        for the name ranks its own paragraph first) and stating all of its facts."""
        return [self._document(e) for e in self.entities]

    def _document(self, e: Entity) -> Document:
        sentences = [f"{e.name} is {_KIND_NOUN[e.kind]}."]
        for rel_name in e.facts:
            relation = RELATIONS[rel_name]
            answer, _, _ = self._object(e, relation)
            sentences.append(relation.sentence.format(s=e.name, o=answer))
        return Document(id=_doc_id(self.seed, e), title=e.name, text=" ".join(sentences))

    # ---- questions -----------------------------------------------------------------------------------

    def single_hop_questions(
        self, n: int | None = None, seed: int = 0, relations: Sequence[str] | None = None
    ) -> list[dict]:
        """`n` distinct questions (None: one per fact, shuffled), each answered by one paragraph (`doc_id`)
        that also names the entity asked about. `relations` restricts the kinds of facts asked (default: all)."""
        chosen = _check_relations(relations)
        pool = [(e, RELATIONS[r]) for e in self.entities for r in e.facts if r in chosen]
        n = len(pool) if n is None else n
        _check_enough(n, len(pool), "single-hop questions", hint="raise num_entities or allow more relations")
        rows = []
        for i, (subject, relation) in enumerate(random.Random(seed).sample(pool, n)):
            answer, aliases, _ = self._object(subject, relation)
            rows.append({
                "id": f"fw{self.seed}-1hop-{seed}-{i}",
                "question": relation.question.format(x=subject.name),
                "answer": answer,
                "aliases": list(aliases),
                "doc_id": _doc_id(self.seed, subject),
                "entity": subject.name,
                "relation": relation.name,
            })
        return rows

    def multi_hop_questions(
        self,
        n: int,
        hops: int = 2,
        seed: int = 0,
        num_paragraphs: int = 20,
        relations: Sequence[str] | None = None,
    ) -> list[dict]:
        """`n` distinct `hops`-hop questions in the MuSiQue-Ans record layout: `paragraphs` (the supporting
        paragraph of each hop plus distractors, `num_paragraphs` in all as MuSiQue's 20), `question_decomposition`
        (one sub-question per hop, later hops refer to earlier answers as "#k", as MuSiQue writes them),
        `answer`, `answer_aliases`, `answerable`."""
        if not 2 <= hops <= 4:
            raise ValueError(f"multi_hop_questions(hops={hops}): MuSiQue-style questions have 2 to 4 hops")
        if num_paragraphs < hops:
            raise ValueError(
                f"multi_hop_questions(num_paragraphs={num_paragraphs}): need at least one paragraph per hop "
                f"({hops}); pass num_paragraphs >= hops"
            )
        chosen = _check_relations(relations)
        chains = self._chains(hops, chosen)
        _check_enough(n, len(chains), f"{hops}-hop questions", hint="raise num_entities or allow more relations")
        rng = random.Random(seed)
        docs = {d.id: d for d in self.documents()}
        return [
            self._multi_hop_record(chain, rng, docs, num_paragraphs, record_id=f"{hops}hop__fw{self.seed}_{seed}_{i}")
            for i, chain in enumerate(rng.sample(chains, n))
        ]

    def _chains(self, hops: int, chosen: set[str]) -> list[tuple[Entity, tuple[Relation, ...]]]:
        """Every walk start -> ... of `hops` facts that never revisits an entity (a revisit would let the
        question give its own answer away); only the last fact may be a literal."""
        chains: list[tuple[Entity, tuple[Relation, ...]]] = []

        def extend(start: Entity, current: Entity, path: tuple[Relation, ...], seen: frozenset[str]) -> None:
            if len(path) == hops:
                chains.append((start, path))
                return
            last_hop = len(path) == hops - 1
            for rel_name in current.facts:
                relation = RELATIONS[rel_name]
                if rel_name not in chosen or (relation.target is None and not last_hop):
                    continue
                if relation.target is None:
                    extend(start, current, path + (relation,), seen)
                    continue
                nxt = self.entity(current.facts[rel_name])
                if nxt.id not in seen:
                    extend(start, nxt, path + (relation,), seen | {nxt.id})

        for e in self.entities:
            extend(e, e, (), frozenset({e.id}))
        return chains

    def _multi_hop_record(
        self,
        chain: tuple[Entity, tuple[Relation, ...]],
        rng: random.Random,
        docs: dict[str, Document],
        num_paragraphs: int,
        record_id: str,
    ) -> dict:
        start, path = chain
        subject, phrase = start, start.name
        steps = []  # (sub-question, answer, supporting doc id)
        aliases: tuple[str, ...] = ()
        for k, relation in enumerate(path):
            sub_question = relation.question.format(x=start.name if k == 0 else f"#{k}")
            answer, aliases, target = self._object(subject, relation)
            steps.append((sub_question, answer, _doc_id(self.seed, subject)))
            question = relation.question.format(x=phrase)
            phrase = relation.phrase.format(x=phrase)
            if target is not None:
                subject = target

        supporting = [doc_id for _, _, doc_id in steps]
        mentioned = {docs[d].title for d in supporting}
        others = [d for d in docs.values() if d.id not in supporting]
        rng.shuffle(others)
        # Hard distractors first: paragraphs that mention an entity of the chain compete with the right one.
        others.sort(key=lambda d: not any(name in d.text for name in mentioned))
        paragraphs = [docs[d] for d in supporting] + others[: num_paragraphs - len(supporting)]
        rng.shuffle(paragraphs)
        position = {d.id: idx for idx, d in enumerate(paragraphs)}
        answer = steps[-1][1]
        return {
            "id": record_id,
            "paragraphs": [
                {"idx": idx, "title": d.title, "paragraph_text": d.text, "is_supporting": d.id in supporting}
                for idx, d in enumerate(paragraphs)
            ],
            "question": question,
            "question_decomposition": [
                {"id": k, "question": q, "answer": a, "paragraph_support_idx": position[doc_id]}
                for k, (q, a, doc_id) in enumerate(steps)
            ],
            "answer": answer,
            "answer_aliases": [a for a in aliases if a != answer],
            "answerable": True,
        }


def _doc_id(seed: int, e: Entity) -> str:
    return f"factworld-{seed}-{e.id}"


def _unique_stems(rng: random.Random, count: int) -> Iterable[str]:
    """`count` distinct capitalised 2-3 syllable words (names never share a word, so BM25 can tell them apart)."""
    seen: set[str] = set()
    while len(seen) < count:
        stem = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 2, 3)))).capitalize()
        if stem not in seen:
            seen.add(stem)
            yield stem


def _check_relations(relations: Sequence[str] | None) -> set[str]:
    if relations is None:
        return set(RELATIONS)
    unknown = sorted(set(relations) - set(RELATIONS))
    if unknown:
        raise ValueError(f"unknown FactWorld relations {unknown}; choose from {sorted(RELATIONS)}")
    return set(relations)


def _check_enough(n: int, available: int, what: str, hint: str) -> None:
    if n < 1:
        raise ValueError(f"asked for {n} {what}: n must be >= 1")
    if n > available:
        raise ValueError(f"asked for {n} {what} but this world has only {available}: {hint}")
