"""What a training run prints: one line per epoch (a single head's, or a sweep's leader by
name and the heads still training), one line at a time, and no Ray Train INFO dumps."""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["epoch_text", "live", "number", "quiet_ray_train", "say", "say_progress",
           "settings_text", "solved_outcome", "solved_text", "solved_warnings", "sweep_text"]

SHOWN = ("train_loss", "train_acc", "val_loss", "val_acc")
"""Metrics every epoch line shows; the monitored one is added when it is another."""


def quiet_ray_train() -> None:
    """No INFO dumps per report ("Reporting training result ...", "Reported metrics ...")."""
    logging.getLogger("ray.train").setLevel(logging.WARNING)


def say(line: str) -> None:
    """One line to stdout, once: Ray Train's worker print() goes both to stdout and to a
    logger, which showed every epoch twice."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def live() -> bool:
    """Whether stdout is watched as it runs (a terminal, or a notebook's kernel), where one
    line that rewrites itself reads better than a line per epoch; elsewhere (a Ray worker's or
    a job's log) every epoch keeps its line."""
    return sys.stdout.isatty() or "ipykernel" in sys.modules


_shown = [0]
"""The width of the progress line on screen, so a shorter one covers it."""


def say_progress(line: str, final: bool) -> None:
    """The training progress line: written over itself where stdout is live (ending with a
    newline after the last epoch), else one line per call. The per-epoch history is in the run
    folder (metrics.jsonl) and the result."""
    if not live():
        say(line)
        return
    sys.stdout.write("\r" + line.ljust(_shown[0]) + ("\n" if final else ""))
    sys.stdout.flush()
    _shown[0] = 0 if final else len(line)


def epoch_text(m: dict[str, Any], epochs: int, monitor: str, eta_s: float | None = None,
               sweep: list[dict[str, Any]] | None = None, select: str = "") -> str:
    """An epoch's line from its run history row `m`. A single head: its metrics, the
    monitored one included. A sweep (`sweep`: each member's settings): the leader by number
    and settings, its `select` metric at its best epoch, and how many heads still train."""
    head = f"epoch {m['epoch']}/{epochs}  "
    tail = f"  {m['rows_per_s']:.0f} rows/s" + ("" if eta_s is None else f"  eta {eta_s:.0f}s")
    if sweep:
        member, value = m.get("member", 0), m.get("leader_best", m.get(select))
        at = f" (epoch {m['leader_epoch']})" if "leader_epoch" in m else ""
        return (f"{head}leader #{member} {settings_text(sweep[member])}: {select} {number(value)}"
                f"{at}  {m.get('active', len(sweep))} of {len(sweep)} heads training{tail}")
    parts = [f"{k} {number(m[k])}" for k in SHOWN if k in m]
    if monitor not in SHOWN and monitor in m:
        parts.append(f"{monitor} {number(m[monitor])}")
    if "l2_C" in m:  # a solved head: its chosen strength, not the zero lr it never stepped at
        parts.append(f"C {m['l2_C']:g}")
    elif "lr" in m:
        parts.append(f"lr {m['lr']:.2e}")
    return head + "  ".join(parts) + tail


def number(value: Any) -> str:
    """A metric as the console shows it: 4 decimals (3 significant digits when tiny)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-" if value is None else str(value)
    return f"{value:.4f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.3g}"


def settings_text(settings: dict[str, Any]) -> str:
    """A sweep member's settings as `lr=0.01 hidden=[64]`."""
    return " ".join(f"{k}={v}" for k, v in settings.items())


def sweep_text(members: list[dict[str, Any]], head: str) -> str:
    """A sweep by its members' settings (each member's dict) and the config's `head`: `sweep
    of 2 mlp heads over hidden`; `sweep of 8 heads over head, optim.lr` where the families
    differ."""
    keys = dict.fromkeys(k for m in members for k in m)
    varied = [k for k in keys if len({repr(m.get(k)) for m in members}) > 1]
    families = {m.get("head", head) for m in members}
    family = f"{families.pop()} " if len(families) == 1 else ""
    return f"sweep of {len(members)} {family}heads" + (f" over {', '.join(varied)}"
                                                       if varied else "")


def solved_text(history: list[dict[str, Any]], first_epoch: int) -> str | None:
    """How a head solved by L-BFGS was trained, for the summary; None for one trained by epochs
    (or a solved run returned, not run now)."""
    solved = history[-1] if history else {}
    if solved.get("solver") != "lbfgs" or first_epoch:
        return None
    on = (f"{solved['l2_chosen_on']:,} training rows left out of its solve, then solved on "
          "all" if "l2_chosen_on" in solved else "the validation rows")  # older runs: val
    return (f"solved by L-BFGS (full batch, {solved['train_rows']:,} rows; L2 "
            f"C={solved['l2_C']:g} chosen on {on}, "
            f"{solved['lbfgs_iterations']} iterations{solved_warnings(solved)})")


def solved_warnings(solved: dict[str, Any]) -> str:
    """What a solved head's summary must not leave unsaid: the grid widened past its edge (and
    a C still at the widened edge), a solve continued past the iteration cap (and one still
    stopped by it); a run recorded before the head acted on these: its C at an edge of the grid
    and a solve stopped by the cap."""
    from raycache._fit.logreg import GRID, MAX_ITER, WIDEN_DECADES

    c, iterations = solved["l2_C"], solved["lbfgs_iterations"]
    grid = ", ".join(f"{v:g}" for v in GRID)
    if "lbfgs_capped" not in solved:  # an older run: the grid and cap as they were
        out = ""
        if c == max(GRID):
            out += (f"; C is the grid's largest ({grid}): a weaker penalty, untried, might "
                    "score higher")
        elif c == min(GRID):
            out += (f"; C is the grid's smallest ({grid}): a stronger penalty, untried, "
                    "might score higher")
        if iterations >= MAX_ITER:
            out += f"; stopped at the {MAX_ITER}-iteration cap before converging"
        return out
    out = ""
    if widened := solved.get("l2_widened"):
        out += f"; the grid ({grid}) widened to C={widened}"
        tried = [float(v) for v in widened.split(", ")]
        low, high = [v for v in tried if v < min(GRID)], [v for v in tried if v > max(GRID)]
        if (low and c == min(low) and len(low) >= WIDEN_DECADES) or (
                high and c == max(high) and len(high) >= WIDEN_DECADES):
            out += (f": C is still at its edge after {WIDEN_DECADES} decades (the bound), a "
                    "value beyond might score higher")
    if iterations > MAX_ITER:
        out += f"; continued past the {MAX_ITER}-iteration cap"
    if solved["lbfgs_capped"]:
        out += f"; stopped at the {iterations}-iteration bound before converging"
    return out


def solved_outcome(metrics: dict[str, Any]) -> str:
    """A solved head's metrics, for the summary."""
    return (f"val_loss {number(metrics.get('val_loss'))}, val_acc "
            f"{number(metrics.get('val_acc'))} (the checkpoint holds the solved head, epoch 1)")
