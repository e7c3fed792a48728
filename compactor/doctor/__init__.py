"""Checking and repairing a state dir or a database: `check` (checks.py) and `check_database`
(database.py) say what is wrong and how to fix it in a `DoctorReport` (report.py, `render` for
people); `repair` (repair.py) and `repair_database` (database.py) fix what can be fixed. Its
command line is `compactor doctor` (cli/doctor.py)."""

from .checks import check
from .database import check_database, repair_database
from .repair import repair
from .report import DoctorReport, Problem, render

__all__ = ["DoctorReport", "Problem", "check", "check_database", "render", "repair", "repair_database"]
