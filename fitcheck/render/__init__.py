"""Renderers: turn fitcheck's result objects into text tables and JSON documents.

Each module renders one kind of object; tabulate is imported inside the functions that use it,
so importing a renderer stays cheap.
"""
