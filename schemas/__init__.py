"""JSON Schemas of fitcheck's documents, shipped in the wheel as ``fitcheck.schemas`` (see README.md here)."""
