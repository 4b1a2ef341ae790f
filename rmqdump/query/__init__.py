"""Answers to an investigator's questions: listings, index lookups, queue seeks, the store summary. They return results and never print."""
