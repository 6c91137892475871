"""A solved head acting on its own warnings: a C chosen at the grid's edge widens the grid a
decade at a time on that side while the best stays on the edge, and a solve stopped by the
iteration cap continues from where it stopped, each from a warm start, within the bounds of
raycache._fit.logreg (WIDEN_DECADES, CONTINUE_ROUNDS, CONTINUE_SECONDS); what was
widened and continued is recorded for the summary (raycache._train.console)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raycache._fit.logreg import (
    CONTINUE_ROUNDS,
    CONTINUE_SECONDS,
    MAX_ITER,
    TOL,
    WIDEN_DECADES,
    solve,
)

__all__ = ["Grid", "finish", "widen"]


@dataclass
class Grid:
    """The L2 strengths tried, ascending, with their scores and solutions on the rows solved."""

    cs: list[float]
    scores: list[dict[str, float]]
    solutions: list[tuple[Any, Any]]
    widened: list[float] = field(default_factory=list)
    """C values tried past the default grid, in the order tried."""


def widen(grid: Grid, pick: int, solve_one: Callable[[float, tuple[Any, Any]], tuple[Any, Any]],
          score: Callable[[Any, Any], dict[str, float]],
          choose: Callable[[list[dict[str, float]]], int]) -> int:
    """While `pick` is the grid's smallest or largest C (and WIDEN_DECADES allow), solve one
    decade past it (warm-started from its solution), score it, add it to `grid` and choose
    again; returns the final pick's index in `grid`."""
    for _ in range(WIDEN_DECADES):
        if len(grid.cs) < 2 or 0 < pick < len(grid.cs) - 1:
            break
        low = pick == 0
        c = grid.cs[pick] / 10 if low else grid.cs[pick] * 10
        w, b = solve_one(c, grid.solutions[pick])
        at = 0 if low else len(grid.cs)
        grid.cs.insert(at, c)
        grid.scores.insert(at, score(w, b))
        grid.solutions.insert(at, (w, b))
        grid.widened.append(c)
        pick = choose(grid.scores)
    return pick


def finish(x: Any, y: Any, classes: int, c: float, weights: Any, scale: tuple[Any, Any]
           ) -> tuple[Any, Any, int, bool]:
    """The chosen C solved on every row: MAX_ITER iterations, then, while a round stops at its
    cap, up to CONTINUE_ROUNDS more from where it stopped (none begun after CONTINUE_SECONDS).
    Returns (W [D, K], b [K], iterations in all, whether the last round still stopped at its
    cap)."""
    w, b, iters = solve(x, y, classes, [c], MAX_ITER, TOL, weights, scale)
    total = int(iters[0])
    capped, began = total >= MAX_ITER, time.perf_counter()
    for _ in range(CONTINUE_ROUNDS):
        if not capped or time.perf_counter() - began > CONTINUE_SECONDS:
            break
        w, b, iters = solve(x, y, classes, [c], MAX_ITER, TOL, weights, scale, start=(w, b))
        total += int(iters[0])
        capped = int(iters[0]) >= MAX_ITER
    return w[0], b[0], total, capped
