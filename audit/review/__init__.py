"""Reading the trail for reviewers: filtered lists and export, the compliance overview, subject reports."""
