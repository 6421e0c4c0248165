"""Reading the trail for reviewers: filtered lists and export, the compliance overview, subject reports."""

from audit.review.answers import Bar, ChainState, Figures, Overview
from audit.review.overview import chain_state, figures, figures_of, period_overview
from audit.review.queries import EXPORT_COLUMNS, MAX_PAGE, Filters, WholeTrace, export, get_trace, list_traces
from audit.review.subjects import MAX_SUBJECT_PAGE, item_table, report_csv, subject_report

__all__ = [
    "Bar",
    "ChainState",
    "EXPORT_COLUMNS",
    "Figures",
    "Filters",
    "MAX_PAGE",
    "MAX_SUBJECT_PAGE",
    "Overview",
    "WholeTrace",
    "chain_state",
    "export",
    "figures",
    "figures_of",
    "get_trace",
    "item_table",
    "list_traces",
    "period_overview",
    "report_csv",
    "subject_report",
]
