"""Findings and errors, time parsing, Java's String.hashCode: what every layer uses."""
