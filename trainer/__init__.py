"""PySpark jobs that build history sketches and run exact matching over archives (DESIGN.md).

Not built yet.
"""
