"""Checking and repairing a state dir or a database: `check` and `check_database` (checks.py)
say what is wrong and how to fix it in a `DoctorReport` (report.py, `render` for people);
`repair` (repair.py) fixes what can be fixed. Its command line is `compactor doctor`
(cli/doctor.py)."""

from .checks import check, check_database
from .repair import repair
from .report import DoctorReport, Problem, render

__all__ = ["DoctorReport", "Problem", "check", "check_database", "render", "repair"]
