"""What the doctor found: each problem with its fix (`Problem`), the report of one check
(`DoctorReport`: problems, facts, the checks that ran), and the report as people read it
(`render`). The JSON form is `DoctorReport.to_dict`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..render import counted

Severity = Literal["error", "warning"]


@dataclass(slots=True)
class Problem:
    severity: Severity
    check: str
    what: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"severity": self.severity, "check": self.check, "what": self.what, "fix": self.fix}


@dataclass(slots=True)
class DoctorReport:
    state_dir: Path | str  # or the database, as `display_url` shows it (no password)
    problems: list[Problem] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)  # the checks that ran

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def healthy(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.state_dir),
            "healthy": self.healthy,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "checks": self.checks,
            "facts": self.facts,
            "problems": [p.to_dict() for p in self.problems],
        }

    def error(self, check: str, what: str, fix: str) -> None:
        self.problems.append(Problem("error", check, what, fix))

    def warn(self, check: str, what: str, fix: str) -> None:
        self.problems.append(Problem("warning", check, what, fix))


def render(report: DoctorReport) -> str:
    """The human report: facts, then each problem with its fix, then a verdict."""
    out = [f"compactor doctor: {report.state_dir}"]
    f = report.facts
    if f.get("empty"):
        kind = "database" if isinstance(report.state_dir, str) else "state dir"
        out.append(f"  empty {kind} (compactor has not written anything yet)")
    snap = f.get("snapshot")
    if snap:
        out.append(
            f"  snapshot: schema {snap['schema']}, generation {snap['gen']}, {snap['items']:,} items, "
            f"{snap['bytes']:,} bytes"
        )
    elif "snapshot" in f:
        out.append("  snapshot: none yet")
    journal = f.get("journal")
    if journal:
        lines = counted(journal["lines"], "line")
        out.append(f"  journal: generation {journal['gen']}, {lines} of writes, {journal['bytes']:,} bytes")
    items = f.get("items")
    if items:
        out.append(
            f"  memory: {items['total']:,} items ({items['active']:,} active, {items['archived']:,} archived, "
            f"{items['summaries']:,} summaries), {items['tokens_used']:,} of {items['token_budget']:,} tokens"
        )
    if report.checks:
        out.append(f"  checked: {', '.join(report.checks)}")
    for p in report.problems:
        out.append("")
        out.append(f"{p.severity.upper()} [{p.check}] {p.what}")
        out.append(f"  fix: {p.fix}")
    out.append("")
    e, w = len(report.errors), len(report.warnings)
    if e:
        out.append(f"Problems found: {e} error(s), {w} warning(s). Nothing was changed.")
    elif w:
        out.append(f"Healthy, with {w} warning(s). Nothing was changed.")
    else:
        out.append("Healthy. Nothing was changed.")
    return "\n".join(out) + "\n"
