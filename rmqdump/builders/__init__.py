"""Builders: ConsumeQueue and IndexFile files from the scan's columns, the rebuild driver, its settings. With export, the only writers."""
