"""Reading the trail for reviewers: filtered lists and export, the compliance overview, subject reports."""

from audit.review.overview import chain_state, figures, figures_of
from audit.review.queries import EXPORT_COLUMNS, MAX_PAGE, Filters, export, get_trace, list_traces
from audit.review.subjects import MAX_SUBJECT_PAGE, item_table, report_csv, subject_report

__all__ = [
    "EXPORT_COLUMNS",
    "Filters",
    "MAX_PAGE",
    "MAX_SUBJECT_PAGE",
    "chain_state",
    "export",
    "figures",
    "figures_of",
    "get_trace",
    "item_table",
    "list_traces",
    "report_csv",
    "subject_report",
]
