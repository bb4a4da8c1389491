"""A scope's graph as a picture: a deterministic force layout in plain Python, for an SVG the
template draws (templates/web/operator/includes/_graph_svg.html). No outside service, no
JavaScript.

Fruchterman-Reingold from a circle, then nodes pushed apart to a minimum distance, then labels
placed greedily where they overlap no other label and no node: the same relations always give
the same picture. The canvas grows with the number of entities, and the page shows it at its
own size (1 unit = 1 CSS pixel) in a box that scrolls sideways, so labels keep their size on a
phone. At most `max_nodes` entities are drawn (those with the most relations, the focused one
always); the page says so and the table lists everything.

Labels show an entity's display name (as first written, capitals kept), shortened; the full
name is in the node's <title>. An edge label that finds no free place is left out (its <title>
and the table still say it).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memory import graph

MAX_NODES = 60
MIN_WIDTH, MAX_WIDTH = 640, 1120  # 1120: the main column (web.css): no scroll on a desktop
MIN_HEIGHT = 400
FEW = (360, 320)  # the size for 3 entities or fewer, stacked: a phone's width, no scroll
PER_NODE = 250  # canvas width per square root of the node count
MARGIN_X, MARGIN_Y = 90, 50  # room for the labels around the nodes
RADIUS, FOCUS_RADIUS = 8, 12
SEPARATION = 70.0  # nodes closer than this are pushed apart
LABEL = 22  # characters of a label; the full name is in the node's <title>
NODE_FONT, EDGE_FONT = 14.0, 12.0  # px, as web.css sets them (.graph-node-label, -edge-label)
NODE_CHAR, EDGE_CHAR = 0.62, 0.58  # average character width, in ems (a bit generous)
ITERATIONS = 80
GRAVITY = 1.0

Box = tuple[float, float, float, float]  # left, top, right, bottom


@dataclass(frozen=True)
class Node:
    name: str  # normalised: the entity the node's link focuses on
    display: str  # as first written
    label: str
    degree: int
    x: str  # coordinates as text: the template must not localise them
    y: str
    r: str
    label_x: str
    label_y: str  # the text's baseline
    focus: bool = False
    ended: bool = False  # every drawn relation of it has ended


@dataclass(frozen=True)
class Edge:
    source: str
    destination: str
    label: str  # "" when no free place was found
    title: str
    x1: str
    y1: str
    x2: str
    y2: str
    label_x: str
    label_y: str
    ended: bool = False  # every relationship of the arrow has ended


@dataclass(frozen=True)
class Picture:
    nodes: list[Node]
    edges: list[Edge]
    entities: int  # how many entities the relations name, drawn or not
    width: int = MIN_WIDTH
    height: int = MIN_HEIGHT
    focus: str = ""

    @property
    def capped(self) -> bool:
        return self.entities > len(self.nodes)


def _short(text: str) -> str:
    return text if len(text) <= LABEL else text[: LABEL - 1] + "…"


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def canvas(count: int) -> tuple[int, int]:
    """The picture's size for `count` entities: more room as there are more."""
    width = max(MIN_WIDTH, min(MAX_WIDTH, round(PER_NODE * math.sqrt(max(count, 1)) / 10) * 10))
    if count <= 3:
        return FEW
    return width, max(MIN_HEIGHT, round(width * 0.62 / 10) * 10)


def layout(
    names: Sequence[str], pairs: Sequence[tuple[str, str]], *, pinned: str = ""
) -> dict[str, tuple[float, float]]:
    """Positions in the unit square for `names`, pulled together along `pairs`; `pinned` (if
    one of them) stays in the middle."""
    count = len(names)
    if count == 0:
        return {}
    if count == 1:
        return {names[0]: (0.5, 0.5)}
    ring = [n for n in names if n != pinned]
    pos = {
        name: [
            # From the top, clockwise: two entities around a pinned one stack up and down.
            0.5 + 0.4 * math.cos(2 * math.pi * i / len(ring) - math.pi / 2),
            0.5 + 0.4 * math.sin(2 * math.pi * i / len(ring) - math.pi / 2),
        ]
        for i, name in enumerate(ring)
    }
    if pinned in names:
        pos[pinned] = [0.5, 0.5]
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
            if name == pinned:
                continue
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


def _spread(at: dict[str, list[float]], order: Sequence[str], area: Box, pinned: str = "") -> None:
    """Push nodes closer than SEPARATION apart (in pixels, in place), inside `area`."""
    left, top, right, bottom = area
    for _ in range(60):
        moved = False
        for i, a in enumerate(order):
            for b in order[i + 1 :]:
                dx, dy = at[b][0] - at[a][0], at[b][1] - at[a][1]
                dist = math.hypot(dx, dy)
                if dist >= SEPARATION:
                    continue
                moved = True
                if dist < 1e-6:  # on top of each other: apart along a fixed direction
                    dx, dy, dist = 1.0, 0.37, math.hypot(1.0, 0.37)
                push = (SEPARATION - dist) / 2 + 0.5
                ux, uy = dx / dist, dy / dist
                share_a = 0.0 if a == pinned else (1.0 if b == pinned else 0.5)
                share_b = 1.0 - share_a if pinned in (a, b) else 0.5
                at[a][0] -= ux * push * 2 * share_a
                at[a][1] -= uy * push * 2 * share_a
                at[b][0] += ux * push * 2 * share_b
                at[b][1] += uy * push * 2 * share_b
        for name in order:
            at[name][0] = min(max(at[name][0], left), right)
            at[name][1] = min(max(at[name][1], top), bottom)
        if not moved:
            break


def _overlap(a: Box, b: Box) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _text_box(cx: float, cy: float, text: str, font: float, char: float) -> Box:
    w, h = len(text) * font * char + 4, font * 1.25
    return (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)


def _inside(box: Box, width: int, height: int) -> bool:
    return box[0] >= 2 and box[1] >= 2 and box[2] <= width - 2 and box[3] <= height - 2


def picture(
    relations: Sequence[graph.Relation],
    *,
    names: Mapping[str, str] | None = None,
    focus: str = "",
    max_nodes: int = MAX_NODES,
) -> Picture:
    """The picture of these relations: the `max_nodes` entities with most relations (ties by
    name; `focus`, a normalised name, always, drawn larger in the middle), and the relations
    between them, one arrow per direction with its relationships. `names` gives each
    normalised name its display name."""
    display = dict(names or {})
    degree: Counter[str] = Counter()
    valid: dict[tuple[str, str], set[str]] = defaultdict(set)
    ended: dict[tuple[str, str], set[str]] = defaultdict(set)
    live: set[str] = set()  # entities with a valid relation
    for rel in relations:
        degree[rel.source] += 1
        if rel.source == rel.destination:
            continue  # drawn as nothing; listed in the table
        degree[rel.destination] += 1
        (valid if rel.valid else ended)[(rel.source, rel.destination)].add(rel.relationship)
        if rel.valid:
            live.update((rel.source, rel.destination))
    for rel in relations:
        if rel.valid:
            live.add(rel.source)
    ranked = sorted(degree, key=lambda n: (n != focus, -degree[n], n))
    kept = ranked[:max_nodes]
    shown = set(kept)
    pairs = sorted(p for p in valid.keys() | ended.keys() if p[0] in shown and p[1] in shown)
    width, height = canvas(len(kept))
    pinned = focus if focus in shown else ""
    unit = layout(sorted(kept), pairs, pinned=pinned)
    area = (MARGIN_X, MARGIN_Y, width - MARGIN_X, height - MARGIN_Y)
    at = {
        n: [area[0] + x * (area[2] - area[0]), area[1] + y * (area[3] - area[1])]
        for n, (x, y) in unit.items()
    }
    _spread(at, kept, area, pinned)
    point = {n: (p[0], p[1]) for n, p in at.items()}
    radius = {n: float(FOCUS_RADIUS if n == pinned else RADIUS) for n in kept}
    taken: list[Box] = [
        (x - radius[n] - 2, y - radius[n] - 2, x + radius[n] + 2, y + radius[n] + 2)
        for n, (x, y) in point.items()
    ]
    nodes = []
    for n in kept:  # most relations first: they get the best places
        text = _short(display.get(n) or n)
        cx, cy = _place_node_label(
            point[n], radius[n], text, taken=taken, width=width, height=height
        )
        nodes.append(
            Node(
                name=n,
                display=display.get(n) or n,
                label=text,
                degree=degree[n],
                x=_fmt(point[n][0]),
                y=_fmt(point[n][1]),
                r=_fmt(radius[n]),
                label_x=_fmt(cx),
                label_y=_fmt(cy + NODE_FONT * 0.35),
                focus=n == pinned,
                ended=n not in live,
            )
        )
    edges = [
        _edge(
            a,
            b,
            valid=valid[(a, b)],
            ended=ended[(a, b)],
            at=point,
            radius=radius,
            display=display,
            pairs=pairs,
            taken=taken,
        )
        for a, b in pairs
    ]
    return Picture(
        nodes=nodes,
        edges=edges,
        entities=len(degree),
        width=width,
        height=height,
        focus=pinned,
    )


def _place_node_label(
    at: tuple[float, float], r: float, text: str, *, taken: list[Box], width: int, height: int
) -> tuple[float, float]:
    """The centre of the node's label: above, below, beside, then further out; the first
    place free of other labels and nodes, else the least covered one."""
    x, y = at
    w = len(text) * NODE_FONT * NODE_CHAR + 4
    h = NODE_FONT * 1.25
    up, down = y - r - 4 - h / 2, y + r + 4 + h / 2
    side = r + 6 + w / 2
    candidates = [
        (x, up), (x, down), (x + side, y), (x - side, y),
        (x + side - r, up), (x - side + r, up), (x + side - r, down), (x - side + r, down),
        (x, up - h), (x, down + h), (x + side, y - h), (x - side, y - h),
        (x + side, y + h), (x - side, y + h),
    ]  # fmt: skip
    best, best_cost = candidates[0], math.inf
    for cx, cy in candidates:
        box = _text_box(cx, cy, text, NODE_FONT, NODE_CHAR)
        own = (x - r - 2, y - r - 2, x + r + 2, y + r + 2)
        cost = sum(_overlap(box, other) for other in taken if other != own)
        if not _inside(box, width, height):
            cost += 1e6
        if cost < best_cost:
            best, best_cost = (cx, cy), cost
        if cost == 0:
            break
    taken.append(_text_box(*best, text, NODE_FONT, NODE_CHAR))
    return best


def _edge(
    a: str,
    b: str,
    *,
    valid: set[str],
    ended: set[str],
    at: dict[str, tuple[float, float]],
    radius: dict[str, float],
    display: Mapping[str, str],
    pairs: Sequence[tuple[str, str]],
    taken: list[Box],
) -> Edge:
    (x1, y1), (x2, y2) = at[a], at[b]
    dx, dy = x2 - x1, y2 - y1
    dist = max(math.hypot(dx, dy), 1e-9)
    ux, uy = dx / dist, dy / dist
    # Two arrows between the same pair (a -> b and b -> a) sit side by side, not on each other.
    shift = 5.0 if (b, a) in pairs else 0.0
    ox, oy = -uy * shift, ux * shift
    x1, y1 = x1 + ux * (radius[a] + 1) + ox, y1 + uy * (radius[a] + 1) + oy
    x2, y2 = x2 - ux * (radius[b] + 3) + ox, y2 - uy * (radius[b] + 3) + oy
    text = ", ".join(sorted(valid) or sorted(ended))
    title = f"{display.get(a) or a} {text} {display.get(b) or b}"
    if valid and ended:
        title += f" (ended: {', '.join(sorted(ended))})"
    elif not valid:
        title += " (ended)"
    label = _short(text)
    # Along the line, then beside it; the first free place (on the side away from a twin).
    side = 1.0 if shift else 0.0
    candidates = [
        (t, off)
        for t in (0.5, 0.4, 0.6, 0.3, 0.7)
        for off in (side * 10, side * 10 + 12, -12 if not side else 24)
    ]
    place: tuple[float, float] | None = None
    if math.hypot(x2 - x1, y2 - y1) < 30:
        candidates = []  # the arrow is too short to say what it is
    for t, off in candidates:
        cx = x1 + (x2 - x1) * t - uy * off
        cy = y1 + (y2 - y1) * t + ux * off
        box = _text_box(cx, cy, label, EDGE_FONT, EDGE_CHAR)
        if not any(_overlap(box, other) for other in taken):
            place = (cx, cy)
            taken.append(box)
            break
    cx, cy = place or ((x1 + x2) / 2, (y1 + y2) / 2)
    return Edge(
        source=a,
        destination=b,
        label=label if place else "",
        title=title,
        x1=_fmt(x1),
        y1=_fmt(y1),
        x2=_fmt(x2),
        y2=_fmt(y2),
        label_x=_fmt(cx),
        label_y=_fmt(cy + EDGE_FONT * 0.35),
        ended=not valid,
    )
