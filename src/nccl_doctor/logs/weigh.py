"""Weighing: clues -> ranked causes -> findings.

Each clue argues for causes with strengths (catalog data). The clues for one cause combine like independent
witnesses (noisy-OR over distinct observations; the same observation seen on many ranks counts once). The
primary cause is the most likely specific one - a symptom such as 'a peer died' or 'internal error' comes
first only when nothing specific is at least FLOOR likely. Symptoms and the causes the primary explains
(catalog `explains`) fold under it; the other causes stay as ranked alternatives. Confidence is shared out
among the primary and its alternatives, so two equally good readings both come out unsure, and an unsure
primary says what would decide. Differential alternatives (other categories the log's words resemble) are
shown only beside an unsure primary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..catalog import cause as lookup_cause
from ..model import Evidence, Finding, Severity
from .evidence import MAX_EVIDENCE, Clue, observation, spread

FLOOR = 0.2  # a specific cause at least this likely comes before any symptom
SHOWN = 0.15  # alternatives weaker than this are left out
UNSURE = 0.5  # below this confidence the primary says what would decide
MAX_ALTERNATIVES = 4
MAX_SECONDARY = 6
MAX_REASONS = 4
HEADLINE_BONUS = 0.1  # a rule's reasoning heads its finding over a line up to this much stronger


@dataclass
class Weighed:
    """One cause and the clues for it."""

    cause: str
    clues: list[tuple[Clue, float]] = field(default_factory=list)  # (clue, its strength for this cause)

    @property
    def score(self) -> float:
        """Noisy-OR over the witnesses; differential clues count only for a cause nothing else argues for (they
        add alternatives, never weight to evidence)."""
        best: dict[object, float] = {}  # witness -> its strongest clue
        evidenced = [(c, s) for c, s in self.clues if not observation(c.observation).differential]
        for clue, strength in evidenced or self.clues:
            best[witness(clue)] = max(best.get(witness(clue), 0.0), strength)
        miss = 1.0
        for strength in best.values():
            miss *= 1.0 - strength
        return 1.0 - miss

    @property
    def symptom(self) -> bool:
        return lookup_cause(self.cause).symptom

    @property
    def differential(self) -> bool:
        """Argued for only by clues that offer alternatives to an unsure primary."""
        return all(observation(c.observation).differential for c, _ in self.clues)

    def ordered(self) -> list[Clue]:
        """Clues strongest first; a rule's reading of several lines before a bare line about as strong."""
        return [c for c, _ in sorted(self.clues, key=lambda cs: -cs[1] - (0 if observation(cs[0].observation).line
                                                                         else HEADLINE_BONUS))]

    def lines(self) -> set[tuple[str, int]]:
        return {(e.source, e.line) for c, _ in self.clues for e in c.events}

    def earliest(self) -> tuple[int, int]:
        orders = [e.order for c, _ in self.clues for e in c.events]
        return min(orders) if orders else (1 << 30, 0)

    def severity(self) -> Severity:
        return min((c.severity or observation(c.observation).severity for c, _ in self.clues), key=lambda s: s.rank)


def witness(clue: Clue) -> object:
    """Clues that are one piece of evidence: lines of one generic family (several error codes of one failure),
    signatures read off the same line, or one rule observation seen several times."""
    obs = observation(clue.observation)
    if obs.line and not obs.family and clue.events:
        first = clue.first()
        return ("line", first.source, first.line)  # type: ignore[union-attr]
    return obs.witness


def weigh(clues: list[Clue]) -> list[Weighed]:
    """Every cause the clues argue for, most likely first."""
    by_cause: dict[str, Weighed] = {}
    for clue in clues:
        for cause, strength in clue.meaning().items():
            by_cause.setdefault(cause, Weighed(cause)).clues.append((clue, strength))
    return sorted(by_cause.values(), key=lambda w: (-w.score, w.earliest()))


def decide(weighed: list[Weighed]) -> tuple[Weighed, list[Weighed], list[Weighed]]:
    """(primary, alternatives, folded under the primary)."""
    specific = [w for w in weighed if not w.symptom and w.score >= FLOOR - 1e-9]
    primary = specific[0] if specific else weighed[0]
    explained = explained_by(primary)
    alternatives, folded = [], []
    shown = primary.lines()
    for w in weighed:
        if w is primary:
            continue
        if w.symptom or w.cause in explained:
            if not w.lines() <= shown or any(c.evidence for c, _ in w.clues):
                folded.append(w)  # an echo the primary's own lines do not already show
        elif w.score >= SHOWN:
            alternatives.append(w)
    return primary, alternatives[:MAX_ALTERNATIVES], folded[:MAX_SECONDARY]


def explained_by(primary: Weighed) -> set[str]:
    """The causes the primary accounts for: its catalog relations, transitively, and what its clues say."""
    todo = [primary.cause] + [c for clue, _ in primary.clues for c in clue.explains]
    seen: set[str] = set()
    while todo:
        cause = todo.pop()
        if cause not in seen:
            seen.add(cause)
            todo.extend(lookup_cause(cause).explains)
    return seen - {primary.cause}


def findings(clues: list[Clue]) -> list[Finding]:
    """The report's findings: the primary (with what it explains folded under it), then the alternatives."""
    weighed = weigh(clues)
    if not weighed:
        return []
    primary, alternatives, folded = decide(weighed)
    firm = [w for w in alternatives if not w.differential]
    if shares([primary] + firm)[0] >= UNSURE:
        alternatives = firm  # a sure primary needs no differential
    confidence = shares([primary] + alternatives)
    head = finding(primary, confidence[0], [finding(w, w.score, [], limit=3) for w in folded])
    if head.confidence < UNSURE:
        head.fix[:0] = [what_would_decide(primary, alternatives)]
    rest = [finding(w, c, []) for w, c in zip(alternatives, confidence[1:])]
    for f, w in zip(rest, alternatives):
        if w.differential or w.lines() & primary.lines():  # another reading of the same log, not a problem of its own
            f.alternative_to = primary.cause
    return [head] + rest


def shares(contenders: list[Weighed]) -> list[float]:
    """Confidence shared out among contenders: the best score, split in proportion to the squared scores."""
    total = sum(w.score ** 2 for w in contenders)
    top = max(w.score for w in contenders)
    return [top * w.score ** 2 / total if total else 0.0 for w in contenders]


def finding(w: Weighed, confidence: float, secondary: list[Finding], limit: int = MAX_EVIDENCE) -> Finding:
    ordered = w.ordered()
    top = ordered[0]
    reasons = list(dict.fromkeys(c.message for c in ordered[1:]  # a rule's reading; matched lines are evidence
                                 if c.message and c.message != top.message and not observation(c.observation).line))
    ranks, hosts = culprits(ordered)
    return Finding(w.cause, w.severity(), top.message, confidence=confidence, ranks=sorted(ranks), hosts=sorted(hosts),
                   evidence=evidence(ordered, limit), fix=list(dict.fromkeys(f for c in ordered for f in c.fix)),
                   secondary=secondary, reasons=reasons[:MAX_REASONS])


def culprits(clues: list[Clue]) -> tuple[set[int], set[str]]:
    """The ranks and hosts a rule names (it reasoned about whose fault it is); else every rank that said it."""
    reasoned = [c for c in clues if not observation(c.observation).line]
    ranks = set().union(*(c.ranks for c in reasoned)) or set().union(*(c.ranks for c in clues))
    hosts = set().union(*(c.hosts for c in reasoned)) or set().union(*(c.hosts for c in clues))
    return ranks, hosts


def evidence(clues: list[Clue], limit: int) -> list[Evidence]:
    """The clues' own evidence first, then their lines, spread over ranks."""
    extra = list(dict.fromkeys(e for c in clues for e in c.evidence))[:limit // 2 or 1]
    taken = {(e.source, e.line) for e in extra}
    lines = spread([e for c in clues for e in c.events if (e.source, e.line) not in taken], limit - len(extra))
    return extra + [Evidence(e.source, e.text, e.line) for e in lines]


def what_would_decide(primary: Weighed, alternatives: list[Weighed]) -> str:
    """The one piece of information that separates the primary from its nearest alternative."""
    checks = [lookup_cause(primary.cause).confirmation]
    rival = alternatives[0] if alternatives else None
    if rival is not None:
        other = lookup_cause(rival.cause).confirmation
        if other not in checks:
            checks.append(other)
        return (f"Not certain: {lookup_cause(primary.cause).title.lower()} or "
                f"{lookup_cause(rival.cause).title.lower()}. To decide, look at {' and '.join(checks)}.")
    return f"Not certain. To confirm, look at {checks[0]}."
