"""Searches over the one pipeline: what fits instead (routes, ranked), the largest context and batch that fit,
CPU or GPU, and each machine's best weights format; `where` and `models --fits` are searches over whole answers."""
