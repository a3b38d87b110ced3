"""Credit-assignment studies: a grid of (algorithm, seed) training runs under one budget, evaluated on one
held-out set, compared with paired statistics (`rlvr study`, `rlvr analyze STUDY_DIR`).

    settings.py  StudySettings (TOML + overrides, checked up front), the budget every cell shares
    layout.py    the study directory: manifest, base evaluations, cells, completion markers
    runner.py    run_study: one server, base evaluations, cells (run_training + evaluation), resume
    stats.py     pure statistics: paired t intervals, collapse detection, mean curves with a band
    report.py    report.md, summary.json and plots from a study directory
"""

from rlvr.study.layout import StudyLayout, is_study
from rlvr.study.settings import EvaluationSettings, ReportSettings, StudyError, StudySettings

__all__ = ["EvaluationSettings", "ReportSettings", "StudyError", "StudyLayout", "StudySettings", "is_study"]
