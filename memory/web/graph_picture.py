"""A scope's graph as a picture: a deterministic force layout in plain Python, for an SVG the
template draws (templates/web/operator/_graph_svg.html). No outside service, no JavaScript.

Fruchterman-Reingold from a circle: the same relations always give the same picture. At most
`max_nodes` entities are drawn (those with the most relations); the page says so and the table
lists everything.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from memory import graph

MAX_NODES = 60
WIDTH, HEIGHT = 960, 640
MARGIN = 100  # room for the labels around the drawing
RADIUS = 7
LABEL = 24  # characters of a label; the full name is in the node's <title>
ITERATIONS = 80
GRAVITY = 1.0


@dataclass(frozen=True)
class Node:
    name: str
    label: str
    degree: int
    x: str  # coordinates as text: the template must not localise them
    y: str
    label_y: str


@dataclass(frozen=True)
class Edge:
    source: str
    destination: str
    label: str
    title: str
    x1: str
    y1: str
    x2: str
    y2: str
    label_x: str
    label_y: str


@dataclass(frozen=True)
class Picture:
    nodes: list[Node]
    edges: list[Edge]
    entities: int  # how many entities the relations name, drawn or not
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def capped(self) -> bool:
        return self.entities > len(self.nodes)


def _short(text: str) -> str:
    return text if len(text) <= LABEL else text[: LABEL - 1] + "…"


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def layout(
    names: Sequence[str], pairs: Sequence[tuple[str, str]]
) -> dict[str, tuple[float, float]]:
    """Positions in the unit square for `names`, pulled together along `pairs`."""
    count = len(names)
    if count == 0:
        return {}
    if count == 1:
        return {names[0]: (0.5, 0.5)}
    pos = {
        name: [
            0.5 + 0.4 * math.cos(2 * math.pi * i / count),
            0.5 + 0.4 * math.sin(2 * math.pi * i / count),
        ]
        for i, name in enumerate(names)
    }
    k = math.sqrt(1.0 / count)
    temperature = 0.1
    for _ in range(ITERATIONS):
        move = {name: [0.0, 0.0] for name in names}
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                dx, dy = pos[a][0] - pos[b][0], pos[a][1] - pos[b][1]
                dist = max(math.hypot(dx, dy), 1e-3)
                push = k * k / dist
                move[a][0] += dx / dist * push
                move[a][1] += dy / dist * push
                move[b][0] -= dx / dist * push
                move[b][1] -= dy / dist * push
        for a, b in pairs:
            dx, dy = pos[a][0] - pos[b][0], pos[a][1] - pos[b][1]
            dist = max(math.hypot(dx, dy), 1e-3)
            pull = dist * dist / k
            move[a][0] -= dx / dist * pull
            move[a][1] -= dy / dist * pull
            move[b][0] += dx / dist * pull
            move[b][1] += dy / dist * pull
        for name in names:
            # A pull to the centre: without it, pieces with no relation between them drift
            # apart, and the fit at the end squeezes each into a clump.
            move[name][0] -= (pos[name][0] - 0.5) * GRAVITY
            move[name][1] -= (pos[name][1] - 0.5) * GRAVITY
            dx, dy = move[name]
            length = max(math.hypot(dx, dy), 1e-9)
            step = min(length, temperature)
            pos[name][0] += dx / length * step
            pos[name][1] += dy / length * step
        temperature *= 0.95
    return _fit({name: (p[0], p[1]) for name, p in pos.items()})


def _fit(pos: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Stretch the layout over the unit square, each axis on its own (the frame is wider
    than tall); an axis with no spread is centred."""
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]

    def scale(value: float, low: float, high: float) -> float:
        return 0.5 if high - low < 1e-9 else (value - low) / (high - low)

    return {
        n: (scale(x, min(xs), max(xs)), scale(y, min(ys), max(ys))) for n, (x, y) in pos.items()
    }


def picture(relations: Sequence[graph.Relation], *, max_nodes: int = MAX_NODES) -> Picture:
    """The picture of these relations: the `max_nodes` entities with most relations (ties by
    name), and the relations between them, one arrow per direction with its relationships."""
    degree: Counter[str] = Counter()
    labels: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rel in relations:
        if rel.source == rel.destination:
            degree[rel.source] += 1  # drawn as nothing; listed in the table
            continue
        degree[rel.source] += 1
        degree[rel.destination] += 1
        labels[(rel.source, rel.destination)].add(rel.relationship)
    kept = sorted(degree, key=lambda n: (-degree[n], n))[:max_nodes]
    shown = set(kept)
    pairs = [pair for pair in labels if pair[0] in shown and pair[1] in shown]
    unit = layout(sorted(kept), pairs)
    area_w, area_h = WIDTH - 2 * MARGIN, HEIGHT - 2 * MARGIN
    at = {n: (MARGIN + x * area_w, MARGIN + y * area_h) for n, (x, y) in unit.items()}
    nodes = [
        Node(n, _short(n), degree[n], _fmt(at[n][0]), _fmt(at[n][1]), _fmt(at[n][1] - RADIUS - 5))
        for n in kept
    ]
    edges = [_edge(a, b, sorted(labels[(a, b)]), at, (b, a) in labels) for a, b in pairs]
    return Picture(nodes=nodes, edges=edges, entities=len(degree))


def _edge(
    a: str,
    b: str,
    relationships: list[str],
    at: dict[str, tuple[float, float]],
    reverse: bool,
) -> Edge:
    (x1, y1), (x2, y2) = at[a], at[b]
    dx, dy = x2 - x1, y2 - y1
    dist = max(math.hypot(dx, dy), 1e-9)
    ux, uy = dx / dist, dy / dist
    # Two arrows between the same pair (a -> b and b -> a) sit side by side, not on each other.
    shift = 5.0 if reverse else 0.0
    ox, oy = -uy * shift, ux * shift
    x1, y1 = x1 + ux * RADIUS + ox, y1 + uy * RADIUS + oy
    x2, y2 = x2 - ux * (RADIUS + 2) + ox, y2 - uy * (RADIUS + 2) + oy
    text = ", ".join(relationships)
    return Edge(
        source=a,
        destination=b,
        label=_short(text),
        title=f"{a} {text} {b}",
        x1=_fmt(x1),
        y1=_fmt(y1),
        x2=_fmt(x2),
        y2=_fmt(y2),
        label_x=_fmt((x1 + x2) / 2 + ox),
        label_y=_fmt((y1 + y2) / 2 + oy - 3),
    )
